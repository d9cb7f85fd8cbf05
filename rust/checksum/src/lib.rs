//! crc32 of byte buffers, the value of Python's `zlib.crc32` (IEEE 802.3 polynomial, reflected,
//! initial value and final xor 0xFFFFFFFF). Pure Rust; the binding exposes it to Python.
//!
//! `crc32fast` picks its kernel at run time (PCLMULQDQ folding on x86-64, the crc instructions on
//! aarch64, a table elsewhere): 15-23 GB/s on one core of an AVX2 AMD EPYC for bytes in cache, the
//! memory's bandwidth (about 12 GB/s there) otherwise, against 2.3 GB/s for zlib. A pass over a
//! frame thus costs a fraction of the kernel's copy of it into a socket.
//!
//! `crc32_many` cuts the buffers' total bytes into equal shares, one per thread (a buffer is cut
//! where a share ends), and joins the pieces of a cut buffer with `Hasher::combine`: the values are
//! exactly those of one pass per buffer, and one huge tensor is spread over the threads as well as
//! many small ones. Threads are scoped to the call (nothing outlives it, so a forked child is fine),
//! and a thread the OS refuses is done on the caller's thread instead.

use crc32fast::Hasher;

/// Below this many bytes per thread, a thread costs more (start, join) than it saves.
pub const MIN_BYTES_PER_THREAD: usize = 4 << 20;

/// crc32 of one buffer, on the caller's thread.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// crc32 of each buffer (in order), on up to `max_threads` threads (0 counts as 1).
///
/// Uses one thread per `MIN_BYTES_PER_THREAD` bytes in all, at most `max_threads`, the caller's
/// included.
pub fn crc32_many(buffers: &[&[u8]], max_threads: usize) -> Vec<u32> {
    crc32_many_with(buffers, max_threads, MIN_BYTES_PER_THREAD)
}

fn crc32_many_with(buffers: &[&[u8]], max_threads: usize, min_bytes_per_thread: usize) -> Vec<u32> {
    let total: usize = buffers.iter().map(|b| b.len()).sum();
    let threads = max_threads.min(total / min_bytes_per_thread.max(1)).max(1);
    if threads == 1 {
        return buffers.iter().map(|b| crc32(b)).collect();
    }
    let shares = split(buffers, total.div_ceil(threads));
    let hashed: Vec<Vec<(usize, Hasher)>> = std::thread::scope(|scope| {
        let (first, rest) = shares.split_first().expect("threads > 1 means at least one share");
        let handles: Vec<_> = rest
            .iter()
            .map(|share| {
                let spawned = std::thread::Builder::new()
                    .name("atgrpo-crc32".into())
                    .spawn_scoped(scope, move || hash_share(share));
                (share, spawned.ok())
            })
            .collect();
        let mut out = vec![hash_share(first)];
        for (share, handle) in handles {
            out.push(match handle {
                Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                None => hash_share(share),
            });
        }
        out
    });
    let mut per_buffer: Vec<Option<Hasher>> = vec![None; buffers.len()];
    for (index, hasher) in hashed.into_iter().flatten() {
        match &mut per_buffer[index] {
            Some(acc) => acc.combine(&hasher),
            slot @ None => *slot = Some(hasher),
        }
    }
    per_buffer.into_iter().map(|h| h.map_or(0, Hasher::finalize)).collect()
}

type Share<'a> = Vec<(usize, &'a [u8])>;

/// Consecutive shares of about `share_bytes` each: (buffer index, piece) in buffer order. Empty
/// buffers get no piece (their crc32 is 0).
fn split<'a>(buffers: &[&'a [u8]], share_bytes: usize) -> Vec<Share<'a>> {
    let mut shares = vec![Vec::new()];
    let mut room = share_bytes;
    for (index, &buffer) in buffers.iter().enumerate() {
        let mut rest = buffer;
        while !rest.is_empty() {
            if room == 0 {
                shares.push(Vec::new());
                room = share_bytes;
            }
            let (piece, tail) = rest.split_at(rest.len().min(room));
            shares.last_mut().expect("never empty").push((index, piece));
            room -= piece.len();
            rest = tail;
        }
    }
    shares
}

fn hash_share(share: &Share<'_>) -> Vec<(usize, Hasher)> {
    share
        .iter()
        .map(|&(index, piece)| {
            let mut hasher = Hasher::new();
            hasher.update(piece);
            (index, hasher)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time crc32 straight from the definition, independent of crc32fast.
    fn reference(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
    }

    #[test]
    fn matches_the_definition_at_every_length_and_offset() {
        let data = bytes(4096 + 64, 1);
        for len in (0..300).chain([1023, 1024, 1025, 4095, 4096]) {
            for offset in [0, 1, 3, 7, 13] {
                let piece = &data[offset..offset + len];
                assert_eq!(crc32(piece), reference(piece), "len {len} offset {offset}");
            }
        }
    }

    #[test]
    fn threaded_values_equal_one_pass_per_buffer() {
        let lens = [0usize, 1, 7, 1000, 0, 65_537, 3, 250_000, 0];
        let owned: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &n)| bytes(n, i as u64 + 2)).collect();
        let buffers: Vec<&[u8]> = owned.iter().map(|b| &b[1.min(b.len())..]).collect(); // unaligned starts
        let expected: Vec<u32> = buffers.iter().map(|b| reference(b)).collect();
        for threads in [0, 1, 2, 3, 4, 7, 64] {
            for min_share in [1, 100, 4096, 1 << 20] {
                assert_eq!(crc32_many_with(&buffers, threads, min_share), expected, "{threads} threads, {min_share}");
            }
        }
        assert_eq!(crc32_many(&buffers, 4), expected);
        assert!(crc32_many(&[], 4).is_empty());
        assert_eq!(crc32_many(&[&[], &[]], 4), [0, 0]);
    }

    #[test]
    fn one_large_buffer_is_spread_over_the_threads() {
        let data = bytes(3 * MIN_BYTES_PER_THREAD + 5, 9);
        let shares = split(&[&data], data.len().div_ceil(3));
        assert_eq!(shares.len(), 3);
        assert_eq!(shares.iter().flatten().map(|(_, p)| p.len()).sum::<usize>(), data.len());
        assert_eq!(crc32_many(&[&data], 3), [crc32(&data)]);
    }

    #[test]
    fn shares_keep_buffer_order_and_cover_every_byte_once() {
        let owned: Vec<Vec<u8>> = [10usize, 0, 25, 5].iter().map(|&n| vec![1u8; n]).collect();
        let buffers: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let shares = split(&buffers, 8);
        let sizes: Vec<Vec<(usize, usize)>> =
            shares.iter().map(|s| s.iter().map(|&(i, p)| (i, p.len())).collect()).collect();
        assert_eq!(sizes, [vec![(0, 8)], vec![(0, 2), (2, 6)], vec![(2, 8)], vec![(2, 8)], vec![(2, 3), (3, 5)]]);
    }
}
