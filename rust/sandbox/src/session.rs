//! One interpreter start of a program, seen from the host: the pipes, the records, the verdicts.
//!
//! `Session::pump` polls the output pipes, the result pipe, the control pipe (pending writes) and
//! the pidfds of the start's processes (the harness, and in function mode the program's own process
//! too). The per-test clock starts when the program has loaded (`L`) and again at each ack.
//! `Session::finish` gives the interrupted test, if any, its verdict from how the start ended.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::config::SandboxConfig;
use crate::program::{outputs_match, TestResult, Verdict};
use crate::protocol::{self, Mode, Record, RecordReader};
use crate::sys::{self, ExitInfo};

pub enum Stop {
    /// The harness reported every test.
    Done,
    /// A load failure or a kill before `L`: every remaining test already has its verdict.
    Final,
    Timeout,
    OutputLimit,
    Protocol(String),
    /// A process of the start exited (see `Worker::start` for which one is blamed).
    Exited,
    /// Function mode: the checker found the program's side of the call channel closed or garbled
    /// while the program's process lived on.
    Channel,
}

/// Per-test capture: stdout (capped) and the tail of stderr.
pub struct Capture {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    bytes: usize,
    tail: usize,
}

impl Capture {
    pub fn new(tail: usize) -> Self {
        Self { stdout: Vec::new(), stderr: Vec::new(), bytes: 0, tail }
    }

    fn push(&mut self, is_err: bool, data: &[u8], cap: usize) {
        self.bytes += data.len();
        if is_err {
            self.stderr.extend_from_slice(data);
            if self.stderr.len() > 2 * self.tail {
                self.stderr.drain(..self.stderr.len() - self.tail);
            }
        } else {
            let room = cap.saturating_sub(self.stdout.len());
            self.stdout.extend_from_slice(&data[..data.len().min(room)]);
        }
    }

    fn take(&mut self, verdict: Verdict, detail: String, wall_s: f64) -> TestResult {
        let start = self.stderr.len().saturating_sub(self.tail);
        let result = TestResult {
            verdict,
            stdout: std::mem::take(&mut self.stdout),
            stderr_tail: String::from_utf8_lossy(&self.stderr[start..]).into_owned(),
            detail,
            wall_s,
        };
        self.stderr.clear();
        self.bytes = 0;
        result
    }
}

fn harness_verdict(mode: Mode, status: u8, stdout: &[u8], expected: Option<&[u8]>) -> (Verdict, Option<&'static str>) {
    match (mode, status) {
        (_, protocol::ST_MEMORY) => (Verdict::MemoryLimit, None),
        (Mode::Function, protocol::ST_OK) => (Verdict::Passed, None),
        (Mode::Function, protocol::ST_ASSERTION) => (Verdict::WrongAnswer, None),
        (Mode::Function, protocol::ST_UNSUPPORTED) => (Verdict::UnsupportedValue, None),
        (Mode::Stdio, protocol::ST_OK) => match expected {
            Some(want) if !outputs_match(stdout, want) => {
                (Verdict::WrongAnswer, Some("output differs from the expected output"))
            }
            _ => (Verdict::Passed, None),
        },
        (_, protocol::ST_ERROR) => (Verdict::RuntimeError, None),
        // A stdio program's ST_ASSERTION, and any status the harness does not send.
        _ => (Verdict::RuntimeError, None),
    }
}

pub struct Io {
    pub ctl: OwnedFd,
    pub res: OwnedFd,
    pub out: OwnedFd,
    pub err: OwnedFd,
}

pub struct Session<'a> {
    pub cfg: &'a SandboxConfig,
    pub mode: Mode,
    pub expected: &'a [Option<&'a [u8]>],
    pub reader: RecordReader,
    pub capture: Capture,
    pub pending: Vec<u8>,
    pub written: usize,
    pub cur: usize,
    pub loaded: bool,
    pub case_start: Instant,
}

enum Event {
    None,
    Stop(Stop),
}

impl Session<'_> {
    /// Runs until the start ends; `pidfds`: the harness's, and the program's own process's in
    /// function mode (-1 otherwise: poll skips it).
    pub fn pump(&mut self, io: &Io, pidfds: [RawFd; 2], deadline: Instant, results: &mut [Option<TestResult>]) -> Stop {
        let timeout = Duration::from_secs_f64(self.cfg.timeout_s);
        let mut test_deadline = Instant::now() + timeout;
        let (mut out_open, mut err_open) = (true, true);
        loop {
            let now = Instant::now();
            let limit = test_deadline.min(deadline);
            if now >= limit {
                return Stop::Timeout;
            }
            let ms = (limit - now).as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            let want_write = self.written < self.pending.len();
            let mut fds = [
                libc::pollfd { fd: pidfds[0], events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: pidfds[1], events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: io.res.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if out_open { io.out.as_raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if err_open { io.err.as_raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 },
                libc::pollfd {
                    fd: if want_write { io.ctl.as_raw_fd() } else { -1 },
                    events: libc::POLLOUT,
                    revents: 0,
                },
            ];
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if r < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Stop::Protocol(format!("poll failed: {}", std::io::Error::last_os_error()));
            }
            if fds[3].revents != 0 && !self.read_output(io.out.as_raw_fd(), false, &mut out_open) {
                return Stop::OutputLimit;
            }
            if fds[4].revents != 0 && !self.read_output(io.err.as_raw_fd(), true, &mut err_open) {
                return Stop::OutputLimit;
            }
            if fds[5].revents != 0 {
                self.write_pending(io.ctl.as_raw_fd());
            }
            if fds[2].revents != 0 {
                match self.read_records(io, results) {
                    Event::Stop(stop) => return stop,
                    Event::None => {}
                }
                // A record (re)starts the clock of the next test.
                if self.case_start > now {
                    test_deadline = self.case_start + timeout;
                }
            }
            if fds[0].revents != 0 || fds[1].revents != 0 {
                return Stop::Exited;
            }
        }
    }

    /// Reads what is there; false when the test went over its output cap.
    fn read_output(&mut self, fd: RawFd, is_err: bool, open: &mut bool) -> bool {
        let mut buf = [0u8; 65536];
        loop {
            match sys::read_some(fd, &mut buf) {
                Ok(0) => {
                    *open = false;
                    return true;
                }
                Ok(k) => {
                    self.capture.push(is_err, &buf[..k], self.cfg.max_output_bytes);
                    if self.capture.bytes > self.cfg.max_output_bytes {
                        return false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => {
                    *open = false;
                    return true;
                }
            }
        }
    }

    fn write_pending(&mut self, fd: RawFd) {
        while self.written < self.pending.len() {
            match sys::write_some(fd, &self.pending[self.written..]) {
                Ok(k) => self.written += k,
                Err(_) => return, // WouldBlock, or the harness is gone (its exit is seen on the pidfd)
            }
        }
    }

    fn read_records(&mut self, io: &Io, results: &mut [Option<TestResult>]) -> Event {
        let mut buf = [0u8; 8192];
        loop {
            match sys::read_some(io.res.as_raw_fd(), &mut buf) {
                Ok(0) => break,
                Ok(k) => self.reader.push(&buf[..k]),
                Err(_) => break,
            }
        }
        loop {
            match self.reader.next() {
                Ok(None) => return Event::None,
                Err(e) => return Event::Stop(Stop::Protocol(e)),
                Ok(Some(record)) => {
                    if let Some(stop) = self.on_record(record, io, results) {
                        return Event::Stop(stop);
                    }
                }
            }
        }
    }

    fn on_record(&mut self, record: Record, io: &Io, results: &mut [Option<TestResult>]) -> Option<Stop> {
        match record {
            Record::Loaded { index } if index == self.cur && !self.loaded => {
                self.loaded = true;
                self.case_start = Instant::now();
                None
            }
            // Past the last test (a stdio program holds the nonce and can forge an `E` for every
            // index): a garbled record like any other out-of-order one, below.
            Record::TestEnd { index, status, detail } if index == self.cur && self.loaded && index < results.len() => {
                // The harness flushed before reporting and now waits for the ack: all of this
                // test's output is already in the pipes.
                let (mut o, mut e) = (true, true);
                if !self.read_output(io.out.as_raw_fd(), false, &mut o)
                    || !self.read_output(io.err.as_raw_fd(), true, &mut e)
                {
                    return Some(Stop::OutputLimit);
                }
                let (verdict, why) = harness_verdict(self.mode, status, &self.capture.stdout, self.expected[index]);
                let wall = self.case_start.elapsed().as_secs_f64();
                let detail = why.map(str::to_string).unwrap_or(detail);
                results[index] = Some(self.capture.take(verdict, detail, wall));
                self.cur += 1;
                self.case_start = Instant::now();
                self.pending.push(b'c');
                self.write_pending(io.ctl.as_raw_fd());
                None
            }
            Record::LoadFailed { status, detail, .. } if !self.loaded => {
                let (mut o, mut e) = (true, true);
                self.read_output(io.out.as_raw_fd(), false, &mut o);
                self.read_output(io.err.as_raw_fd(), true, &mut e);
                let verdict = if status == protocol::ST_MEMORY { Verdict::MemoryLimit } else { Verdict::RuntimeError };
                let detail = format!("the program failed before its tests ran: {detail}");
                self.fail_remaining(verdict, detail, results);
                Some(Stop::Final)
            }
            Record::Done if self.cur == results.len() => Some(Stop::Done),
            other => Some(Stop::Protocol(format!("unexpected result record {other:?} while at test {}", self.cur))),
        }
    }

    fn fail_remaining(&mut self, verdict: Verdict, detail: String, results: &mut [Option<TestResult>]) {
        let wall = self.case_start.elapsed().as_secs_f64();
        let first = self.capture.take(verdict, detail.clone(), wall);
        for r in results[self.cur..].iter_mut() {
            *r = Some(TestResult { stdout: Vec::new(), ..first.clone() });
        }
        results[self.cur] = Some(first);
    }

    /// Output and records that were still in the pipes when the process ended.
    pub fn drain(&mut self, io: &Io, results: &mut [Option<TestResult>]) {
        if self.cur < results.len() {
            let (mut o, mut e) = (true, true);
            self.read_output(io.out.as_raw_fd(), false, &mut o);
            self.read_output(io.err.as_raw_fd(), true, &mut e);
        }
    }

    /// Gives the interrupted test (if any) its verdict; returns where the next start begins.
    /// `info`: how the blamed process ended; `harness`: whether that is the harness (only it can
    /// fail to read its input).
    pub fn finish(
        mut self,
        stop: Stop,
        info: Option<ExitInfo>,
        harness: bool,
        cpu_limit: u64,
        results: &mut [Option<TestResult>],
    ) -> usize {
        let n = results.len();
        if matches!(stop, Stop::Done | Stop::Final) || self.cur >= n {
            return n;
        }
        let stderr_says_memory = String::from_utf8_lossy(&self.capture.stderr).contains("MemoryError");
        let (verdict, detail) = match (&stop, info) {
            (Stop::Timeout, _) => (Verdict::Timeout, format!("wall-clock limit ({} s) exceeded", self.cfg.timeout_s)),
            (Stop::OutputLimit, _) => {
                (Verdict::OutputLimit, format!("more than {} bytes of output", self.cfg.max_output_bytes))
            }
            (Stop::Protocol(e), _) => (Verdict::SandboxError, e.clone()),
            (Stop::Channel, _) => (
                Verdict::RuntimeError,
                "the program closed or wrote into the channel its tests call it through".to_string(),
            ),
            (_, Some(i))
                if i.signal == Some(libc::SIGXCPU)
                    || (i.signal == Some(libc::SIGKILL) && i.cpu_s >= cpu_limit as f64 - 0.05) =>
            {
                (Verdict::Timeout, format!("CPU time limit ({cpu_limit} s) exceeded"))
            }
            (_, _) if stderr_says_memory => {
                (Verdict::MemoryLimit, format!("out of memory (limit {} MiB)", self.cfg.memory_mb))
            }
            (_, Some(ExitInfo { signal: Some(s), .. })) => {
                (Verdict::RuntimeError, format!("killed by {} ({s})", sys::signal_name(s)))
            }
            (_, Some(ExitInfo { code: Some(c @ (70 | 72)), .. })) if !self.loaded && harness => {
                (Verdict::SandboxError, format!("the harness could not read its input (status {c})"))
            }
            (_, Some(ExitInfo { code: Some(c), .. })) => {
                (Verdict::RuntimeError, format!("the interpreter exited with status {c} before the test finished"))
            }
            _ => (Verdict::SandboxError, "the interpreter vanished".to_string()),
        };
        if !self.loaded {
            // Failing before the tests start would fail every start the same way.
            let detail = format!("the program failed before its tests ran: {detail}");
            self.fail_remaining(verdict, detail, results);
            return n;
        }
        let wall = self.case_start.elapsed().as_secs_f64();
        results[self.cur] = Some(self.capture.take(verdict, detail, wall));
        self.cur + 1
    }
}
