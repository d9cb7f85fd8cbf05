//! Sudoku (placeholder being written: see the Sudoku task work).

use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::task::{Common, Outcome, Scratch, Split, Task};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SudokuConfig {
    pub size: u32,
}

#[derive(Clone)]
pub struct Sudoku;

impl Task for Sudoku {
    type Config = SudokuConfig;
    const NAME: &'static str = "sudoku";
    const TAG: u8 = 2;
    fn check_config(_cfg: &Self::Config, _common: &Common) -> Result<()> {
        todo!()
    }
    fn generate(_cfg: &Self::Config, _seed: u64, _split: Split) -> Result<Self> {
        todo!()
    }
    fn step(&mut self, _common: &Common, _action: Option<&str>, _scratch: &mut Scratch) -> Outcome {
        todo!()
    }
    fn render(&self, _out: &mut String) {
        todo!()
    }
    fn solve(&self) -> Option<String> {
        todo!()
    }
    fn optimal_len(&self) -> u32 {
        todo!()
    }
    fn encode(&self, _out: &mut Writer) {
        todo!()
    }
    fn decode(_cfg: &Self::Config, _input: &mut Reader<'_>) -> Result<Self> {
        todo!()
    }
}
