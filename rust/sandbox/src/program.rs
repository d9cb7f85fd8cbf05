//! What goes in (a program and its tests) and what comes out (one verdict per test).
//!
//! Two formats. `Stdio`: the program reads stdin and writes stdout; each case is run as `__main__`
//! with its own stdin, and its stdout is compared here, in Rust, with the expected text (whitespace
//! normalised, see `outputs_match`), so the program cannot report its own success. `Function`: the
//! program defines functions, `setup` runs after it (e.g. HumanEval's `check`), then each test is a
//! snippet of Python run in the same namespace; it passes when it finishes, fails with an
//! `AssertionError` (wrong answer) or any other exception (runtime error). The program itself runs
//! in a process of its own and its values reach the tests as plain data only (see `lib.rs`); a test
//! that needs any other value of the program gets `unsupported_value`.

use serde::Serialize;

use crate::error::{Result, SandboxError};

/// Largest program, setup, test or stdin text accepted, and the largest total per program.
pub const MAX_TEXT_BYTES: usize = 64 << 20;
/// Most tests (cases) per program.
pub const MAX_TESTS: usize = 100_000;

#[derive(Debug, Clone, PartialEq)]
pub struct StdioCase {
    pub stdin: Vec<u8>,
    /// `None`: no comparison; the test passes when the program ends normally (its stdout is returned).
    pub expected: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    Stdio { code: String, cases: Vec<StdioCase> },
    Function { code: String, setup: String, tests: Vec<String> },
}

impl Program {
    pub fn num_tests(&self) -> usize {
        match self {
            Program::Stdio { cases, .. } => cases.len(),
            Program::Function { tests, .. } => tests.len(),
        }
    }

    pub fn validate(&self, index: usize) -> Result<()> {
        let bad = |msg: String| SandboxError::InvalidProgram { index, msg };
        let n = self.num_tests();
        if n == 0 {
            return Err(bad("a program needs at least one test (a stdio case with expected=None just runs it)".into()));
        }
        if n > MAX_TESTS {
            return Err(bad(format!("{n} tests; at most {MAX_TESTS}")));
        }
        let total: usize = match self {
            Program::Stdio { code, cases } => {
                code.len()
                    + cases.iter().map(|c| c.stdin.len() + c.expected.as_ref().map_or(0, Vec::len)).sum::<usize>()
            }
            Program::Function { code, setup, tests } => {
                code.len() + setup.len() + tests.iter().map(String::len).sum::<usize>()
            }
        };
        if total > MAX_TEXT_BYTES {
            return Err(bad(format!("{total} bytes of program and tests; at most {MAX_TEXT_BYTES}")));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    WrongAnswer,
    RuntimeError,
    Timeout,
    MemoryLimit,
    OutputLimit,
    /// Function tests: the test needed the value of something the program gave that is not plain
    /// data (None, bool, int, float, complex, str, bytes, and lists, tuples, dicts, sets of them),
    /// e.g. compared an object of its own class, a subclass of `int` or a generator. A failure.
    UnsupportedValue,
    /// The sandbox itself failed (spawn error, harness protocol broken).
    SandboxError,
    /// Not run: the program's interpreter starts or its time budget were used up by earlier tests.
    Skipped,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::WrongAnswer => "wrong_answer",
            Verdict::RuntimeError => "runtime_error",
            Verdict::Timeout => "timeout",
            Verdict::MemoryLimit => "memory_limit",
            Verdict::OutputLimit => "output_limit",
            Verdict::UnsupportedValue => "unsupported_value",
            Verdict::SandboxError => "sandbox_error",
            Verdict::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub verdict: Verdict,
    /// What the test wrote to stdout (at most `max_output_bytes`; bytes, they need not be UTF-8).
    pub stdout: Vec<u8>,
    /// The last `stderr_tail_bytes` of its stderr (traceback), decoded lossily.
    pub stderr_tail: String,
    /// One line on why: the exception (`ZeroDivisionError: division by zero`), the signal, the limit.
    pub detail: String,
    pub wall_s: f64,
}

impl TestResult {
    pub fn bare(verdict: Verdict, detail: impl Into<String>) -> Self {
        Self { verdict, stdout: Vec::new(), stderr_tail: String::new(), detail: detail.into(), wall_s: 0.0 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProgramResult {
    /// One per test, in order.
    pub tests: Vec<TestResult>,
    /// Interpreter starts used (1 when every test ran in one interpreter).
    pub starts: u32,
    pub wall_s: f64,
}

impl ProgramResult {
    pub fn passed(&self) -> bool {
        self.tests.iter().all(|t| t.verdict == Verdict::Passed)
    }
}

/// Lines with surrounding whitespace removed, blank lines at both ends dropped ("\r\n" counts as
/// "\n"). Judges of the stdin/stdout datasets (APPS, CodeContests) compare outputs this way.
pub fn outputs_match(got: &[u8], expected: &[u8]) -> bool {
    fn lines(s: &[u8]) -> Vec<&[u8]> {
        let mut v: Vec<&[u8]> = s.split(|&b| b == b'\n').map(|l| l.trim_ascii()).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        let start = v.iter().position(|l| !l.is_empty()).unwrap_or(v.len());
        v.drain(..start);
        v
    }
    lines(got) == lines(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_normalised_but_tokens_are_not() {
        assert!(outputs_match(b"1 2\r\n3  \n\n", b"1 2\n3"));
        assert!(outputs_match(b"\n  hello\n", b"hello\n"));
        assert!(outputs_match(b"", b"\n\n"));
        assert!(!outputs_match(b"1 2\n3", b"1\n2 3"));
        assert!(!outputs_match(b"12", b"1 2"));
        assert!(!outputs_match(b"\xff\xfe", b"ok"));
    }

    #[test]
    fn programs_without_tests_are_refused() {
        let p = Program::Function { code: "x=1".into(), setup: String::new(), tests: vec![] };
        assert!(matches!(p.validate(3), Err(SandboxError::InvalidProgram { index: 3, .. })));
        let p = Program::Stdio { code: "print(1)".into(), cases: vec![StdioCase { stdin: vec![], expected: None }] };
        assert!(p.validate(0).is_ok());
    }
}
