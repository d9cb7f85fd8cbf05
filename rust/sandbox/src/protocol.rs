//! The wire between the host and the in-sandbox harness (`harness.py`), both directions.
//!
//! Host -> harness, fd 3: the harness's own code (see `BOOT`), `nonce[16]`, then `b"ATGS" mode(b's'|b'f') first:u32 count:u32 body_len:u64`,
//! then the body: length-prefixed (u32) blobs `code`, `setup`, and one blob per test from `first` to
//! `count - 1` (test source, or the case's stdin). Later one `b"c"` per finished test: the harness
//! waits for it, so everything on stdout/stderr before the ack belongs to that test.
//! Harness -> host, fd 4: records `nonce[16] kind:u8 index:u32 len:u32 payload`. Kinds: `L` program
//! loaded, `E` test `index` ended (payload: status byte + detail), `P` program failed to load (same
//! payload; every remaining test gets it), `D` all done. All integers little-endian.
//!
//! A record with the wrong nonce, an unknown kind, an out-of-order index (one past the last test
//! included) or an oversized payload is a protocol violation: the execution is stopped and the
//! test gets `sandbox_error` (no test is left once a forged record ends the last one).
//!
//! Function mode adds a second process, the program's own (`CANDIDATE`), which only ever talks to
//! the checker (`HARNESS`) over a pipe pair the host made (its fds 3 and 4; the checker's 5 and 6):
//! see `candidate.py` and `remote.py`. The host never reads that channel. When the checker finds it
//! broken (the program exited, closed it or sent garbage) it exits with `CHANNEL_BROKEN`.

/// The checker: the harness the host talks to, with the plain-data codec and the stand-ins.
pub const HARNESS: &str = concat!(include_str!("codec.py"), include_str!("remote.py"), include_str!("harness.py"));
/// The program's own process in function mode.
pub const CANDIDATE: &str = concat!(include_str!("codec.py"), include_str!("candidate.py"));
/// A worker's zygote (`zygote.rs`): forks the two processes above from one warm interpreter.
pub const ZYGOTE: &str = include_str!("zygote.py");
/// Every start runs this line (`python -I -S -c BOOT`): fd 3 first brings `len:u32` and the
/// script's code, compiled once per sandbox by the same interpreter (`marshal`), so that a start
/// pays for unmarshalling it (well under 1 ms) instead of compiling ~500 lines (~5-10 ms of CPU).
/// The harness's code comes from the host, the program process's from the host too (written into
/// its request pipe before the checker can write there).
pub const BOOT: &str = "def _atgrpo_boot():
    import marshal, os

    def exact(k):
        b = b''
        while len(b) < k:
            c = os.read(3, k - len(b))
            if not c:
                os._exit(70)
            b += c
        return b

    return marshal.loads(exact(int.from_bytes(exact(4), 'little')))


exec(_atgrpo_boot())
";
/// Compiles scripts (separated by NUL on stdin) into `len:u32 marshal` blobs on stdout; run once
/// per sandbox, on the host, by the sandbox's interpreter.
pub const COMPILER: &str = "import marshal, sys
for src in sys.stdin.buffer.read().decode().split('\\0'):
    code = marshal.dumps(compile(src, '<string>', 'exec', dont_inherit=True))
    sys.stdout.buffer.write(len(code).to_bytes(4, 'little') + code)
";

/// Exit status of the checker when the program's side of the call channel failed.
pub const CHANNEL_BROKEN: i32 = 75;
pub const NONCE_LEN: usize = 16;
const HEADER_LEN: usize = NONCE_LEN + 1 + 4 + 4;
const MAX_PAYLOAD: usize = 64 << 10;

/// Test outcome as the harness reports it.
pub const ST_OK: u8 = 0;
pub const ST_ASSERTION: u8 = 1;
pub const ST_ERROR: u8 = 2;
pub const ST_MEMORY: u8 = 3;
/// A value the test needed was not plain data (function mode).
pub const ST_UNSUPPORTED: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Stdio,
    Function,
}

pub fn control_message(
    nonce: &[u8; NONCE_LEN],
    mode: Mode,
    first: usize,
    code: &str,
    setup: &str,
    items: &[&[u8]],
) -> Vec<u8> {
    let count = first + items.len();
    let body_len: usize = 8 + code.len() + setup.len() + items.iter().map(|i| 4 + i.len()).sum::<usize>();
    let mut m = Vec::with_capacity(NONCE_LEN + 21 + body_len);
    m.extend_from_slice(nonce);
    m.extend_from_slice(b"ATGS");
    m.push(if mode == Mode::Stdio { b's' } else { b'f' });
    m.extend_from_slice(&(first as u32).to_le_bytes());
    m.extend_from_slice(&(count as u32).to_le_bytes());
    m.extend_from_slice(&(body_len as u64).to_le_bytes());
    for blob in [code.as_bytes(), setup.as_bytes()].into_iter().chain(items.iter().copied()) {
        m.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        m.extend_from_slice(blob);
    }
    m
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Loaded { index: usize },
    TestEnd { index: usize, status: u8, detail: String },
    LoadFailed { index: usize, status: u8, detail: String },
    Done,
}

/// Reassembles records from the bytes of fd 4, which arrive in arbitrary pieces.
pub struct RecordReader {
    nonce: [u8; NONCE_LEN],
    buf: Vec<u8>,
}

impl RecordReader {
    pub fn new(nonce: [u8; NONCE_LEN]) -> Self {
        Self { nonce, buf: Vec::new() }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete record, `Ok(None)` when more bytes are needed, `Err` on a violation.
    pub fn next(&mut self) -> Result<Option<Record>, String> {
        if self.buf.len() < HEADER_LEN {
            // A wrong nonce is reported as soon as its bytes are in.
            let n = self.buf.len().min(NONCE_LEN);
            if self.buf[..n] != self.nonce[..n] {
                return Err("result record with a wrong nonce (forged?)".into());
            }
            return Ok(None);
        }
        if self.buf[..NONCE_LEN] != self.nonce {
            return Err("result record with a wrong nonce (forged?)".into());
        }
        let kind = self.buf[NONCE_LEN];
        let index = u32::from_le_bytes(self.buf[NONCE_LEN + 1..NONCE_LEN + 5].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(self.buf[NONCE_LEN + 5..HEADER_LEN].try_into().unwrap()) as usize;
        if len > MAX_PAYLOAD {
            return Err(format!("result record payload of {len} bytes"));
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload: Vec<u8> = self.buf.drain(..HEADER_LEN + len).skip(HEADER_LEN).collect();
        let (status, detail) = match payload.split_first() {
            Some((s, rest)) => (*s, String::from_utf8_lossy(rest).into_owned()),
            None => (ST_OK, String::new()),
        };
        match kind {
            b'L' => Ok(Some(Record::Loaded { index })),
            b'E' if !payload.is_empty() && status <= ST_UNSUPPORTED => {
                Ok(Some(Record::TestEnd { index, status, detail }))
            }
            b'P' if !payload.is_empty() && status <= ST_UNSUPPORTED => {
                Ok(Some(Record::LoadFailed { index, status, detail }))
            }
            b'D' => Ok(Some(Record::Done)),
            _ => Err(format!("malformed result record (kind {kind:#x})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(nonce: &[u8; 16], kind: u8, index: u32, payload: &[u8]) -> Vec<u8> {
        let mut r = nonce.to_vec();
        r.push(kind);
        r.extend_from_slice(&index.to_le_bytes());
        r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        r.extend_from_slice(payload);
        r
    }

    #[test]
    fn records_reassemble_from_single_bytes() {
        let nonce = [7u8; 16];
        let mut bytes = record(&nonce, b'L', 0, b"");
        bytes.extend(record(&nonce, b'E', 0, b"\x01AssertionError: x"));
        bytes.extend(record(&nonce, b'D', 1, b""));
        let mut r = RecordReader::new(nonce);
        let mut out = vec![];
        for b in bytes {
            r.push(&[b]);
            while let Some(rec) = r.next().unwrap() {
                out.push(rec);
            }
        }
        assert_eq!(
            out,
            vec![
                Record::Loaded { index: 0 },
                Record::TestEnd { index: 0, status: ST_ASSERTION, detail: "AssertionError: x".into() },
                Record::Done
            ]
        );
    }

    #[test]
    fn a_wrong_nonce_or_kind_is_a_violation() {
        let mut r = RecordReader::new([1u8; 16]);
        r.push(b"PASSED");
        assert!(r.next().is_err());
        let mut r = RecordReader::new([1u8; 16]);
        r.push(&record(&[1u8; 16], b'X', 0, b""));
        assert!(r.next().is_err());
        let mut r = RecordReader::new([1u8; 16]);
        r.push(&record(&[1u8; 16], b'E', 0, b"\x05"));
        assert!(r.next().is_err());
    }

    #[test]
    fn control_message_layout() {
        let m = control_message(&[0; 16], Mode::Function, 2, "ab", "", &[b"t2", b"t3"]);
        assert_eq!(&m[16..20], b"ATGS");
        assert_eq!(m[20], b'f');
        assert_eq!(u32::from_le_bytes(m[21..25].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(m[25..29].try_into().unwrap()), 4);
        assert_eq!(u64::from_le_bytes(m[29..37].try_into().unwrap()) as usize, m.len() - 37);
    }
}
