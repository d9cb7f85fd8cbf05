//! `Cells`: a 256-bit set of grid cells (grids are at most 16x16, so a cell index fits a u8).
//! Copying a whole level state is then a few words, which is what makes `fork` cheap.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cells([u64; 4]);

impl Cells {
    #[inline]
    pub fn has(&self, cell: usize) -> bool {
        self.0[cell >> 6] >> (cell & 63) & 1 == 1
    }
    #[inline]
    pub fn set(&mut self, cell: usize) {
        self.0[cell >> 6] |= 1 << (cell & 63);
    }
    #[inline]
    pub fn unset(&mut self, cell: usize) {
        self.0[cell >> 6] &= !(1 << (cell & 63));
    }
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    pub fn and(&self, other: &Cells) -> Cells {
        Cells([0, 1, 2, 3].map(|i| self.0[i] & other.0[i]))
    }
    pub fn or(&self, other: &Cells) -> Cells {
        Cells([0, 1, 2, 3].map(|i| self.0[i] | other.0[i]))
    }
    /// Cell indices in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..4).flat_map(move |w| {
            let mut word = self.0[w];
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let bit = word.trailing_zeros() as usize;
                    word &= word - 1;
                    w * 64 + bit
                })
            })
        })
    }
}
