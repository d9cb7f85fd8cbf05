//! Sandbox limits and switches, parsed from JSON (the Python facade sends a pydantic model's dump).
//!
//! Every field has a default, unknown fields are refused, and `validate` range-checks everything
//! once, so the spawn path never meets a nonsensical limit.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, SandboxError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Interpreter to run; `None` means `python3` found on `PATH`.
    pub python: Option<String>,
    /// Executions run at the same time (worker threads).
    pub workers: usize,
    /// Wall-clock limit of one test (for the first test of a start, interpreter start included).
    pub timeout_s: f64,
    /// Wall-clock limit of one program: all its tests and interpreter starts together.
    pub program_timeout_s: f64,
    /// Address-space limit per process (RLIMIT_AS), MiB.
    pub memory_mb: u64,
    /// Processes and threads of one execution (RLIMIT_NPROC, counted per execution in its own user
    /// namespace). Without namespaces, child processes are refused instead (see `Isolation`).
    pub max_processes: u64,
    /// Largest file a program may write (RLIMIT_FSIZE), MiB.
    pub max_file_mb: u64,
    /// Open file descriptors per process (RLIMIT_NOFILE).
    pub max_open_files: u64,
    /// Bytes of stdout plus stderr one test may produce before it gets `output_limit`.
    pub max_output_bytes: usize,
    /// Bytes of stderr kept (the tail) per test.
    pub stderr_tail_bytes: usize,
    /// Interpreter starts per program: after a test kills the interpreter (timeout, crash, ...), the
    /// remaining tests run in a fresh one until this many starts are used; the rest are `skipped`.
    pub max_starts: u32,
    /// Use user/pid/ipc namespaces per execution and a shared empty network namespace and read-only
    /// mount namespace, when the kernel allows.
    pub namespaces: bool,
    /// Fail at construction instead of warning when namespaces are unavailable.
    pub require_namespaces: bool,
    /// Fail at construction instead of warning when the kernel's Landlock lacks any layer the
    /// sandbox asks for (file fence, truncate, TCP, device ioctl, signal and abstract-socket
    /// scopes: ABI >= 6).
    pub require_landlock: bool,
    /// Extra paths the program may read (and execute) besides the interpreter's prefix and system
    /// library directories.
    pub read_paths: Vec<String>,
    /// Where the private working directories are made; `None` means the system temp dir.
    pub tmp_root: Option<String>,
    /// Benchmark reference only: spawn the interpreter the same way with no isolation at all.
    pub unsafe_no_isolation: bool,
    /// Stdio programs fork their harness from the worker's zygote, as function programs do (where
    /// the zygote passed its self-test); `false`: each start spawns its own interpreter (the path
    /// before issue 47, kept as the benchmark's and the tests' reference).
    pub stdio_zygote: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            python: None,
            workers: 2,
            timeout_s: 5.0,
            program_timeout_s: 30.0,
            memory_mb: 1024,
            max_processes: 32,
            max_file_mb: 16,
            max_open_files: 256,
            max_output_bytes: 1 << 20,
            stderr_tail_bytes: 4096,
            max_starts: 3,
            namespaces: true,
            require_namespaces: false,
            require_landlock: false,
            read_paths: Vec::new(),
            tmp_root: None,
            unsafe_no_isolation: false,
            stdio_zygote: true,
        }
    }
}

fn bad(msg: impl Into<String>) -> SandboxError {
    SandboxError::InvalidConfig(msg.into())
}

fn check_range<T: PartialOrd + std::fmt::Display>(name: &str, v: T, lo: T, hi: T) -> Result<()> {
    // Written as !(in range) so that NaN fails too.
    if !(v >= lo && v <= hi) {
        return Err(bad(format!("{name} must be in [{lo}, {hi}], got {v}")));
    }
    Ok(())
}

impl SandboxConfig {
    pub fn from_json(json: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        check_range("workers", self.workers, 1, 256)?;
        check_range("timeout_s", self.timeout_s, 0.01, 3600.0)?;
        check_range("program_timeout_s", self.program_timeout_s, 0.01, 36000.0)?;
        check_range("memory_mb", self.memory_mb, 32, 1 << 20)?;
        check_range("max_processes", self.max_processes, 1, 4096)?;
        check_range("max_file_mb", self.max_file_mb, 1, 1 << 20)?;
        check_range("max_open_files", self.max_open_files, 16, 1 << 20)?;
        check_range("max_output_bytes", self.max_output_bytes, 1024, 1 << 30)?;
        check_range("stderr_tail_bytes", self.stderr_tail_bytes, 64, 1 << 20)?;
        check_range("max_starts", self.max_starts, 1, 1000)?;
        if self.require_namespaces && (!self.namespaces || self.unsafe_no_isolation) {
            return Err(bad("require_namespaces needs namespaces = true and unsafe_no_isolation = false"));
        }
        if self.require_landlock && self.unsafe_no_isolation {
            return Err(bad("require_landlock needs unsafe_no_isolation = false"));
        }
        for p in self.read_paths.iter().chain(self.tmp_root.iter()).chain(self.python.iter()) {
            if p.is_empty() || p.contains('\0') {
                return Err(bad(format!("paths must be non-empty and free of NUL bytes, got {p:?}")));
            }
        }
        for p in &self.read_paths {
            if !Path::new(p).is_absolute() {
                return Err(bad(format!("read_paths must be absolute, got {p:?}")));
            }
        }
        Ok(())
    }

    /// The interpreter as an absolute path; it must exist and be executable. Without a configured
    /// path, `python3` on `PATH` is asked for its `sys.executable`, which sees through launcher
    /// scripts (pyenv shims) that could not run inside the sandbox.
    pub fn resolve_python(&self) -> Result<PathBuf> {
        if self.python.is_none() {
            let out = std::process::Command::new("python3")
                .args(["-I", "-S", "-c", "import sys; print(sys.executable)"])
                .env_remove("PYTHONPATH")
                .output()
                .map_err(|e| bad(format!("python3 not found on PATH: {e}")))?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !out.status.success() || path.is_empty() {
                return Err(bad("python3 on PATH did not report its sys.executable"));
            }
            return SandboxConfig { python: Some(path), ..self.clone() }.resolve_python();
        }
        let name = self.python.as_deref().unwrap_or("python3");
        let candidate = if name.contains('/') {
            Some(PathBuf::from(name))
        } else {
            std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .find(|p| is_executable(p))
        };
        match candidate {
            Some(p) if is_executable(&p) => std::path::absolute(&p).map_err(|e| bad(format!("python {p:?}: {e}"))),
            _ => Err(bad(format!("python interpreter {name:?} not found or not executable"))),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_unknown_fields_refused() {
        SandboxConfig::default().validate().unwrap();
        assert!(SandboxConfig::from_json("{}").is_ok());
        assert!(matches!(SandboxConfig::from_json(r#"{"wrokers": 2}"#), Err(SandboxError::InvalidConfig(_))));
        assert!(matches!(SandboxConfig::from_json("not json"), Err(SandboxError::InvalidConfig(_))));
    }

    #[test]
    fn ranges_are_checked_nan_included() {
        for json in [
            r#"{"workers": 0}"#,
            r#"{"timeout_s": -1}"#,
            r#"{"memory_mb": 1}"#,
            r#"{"read_paths": ["relative/path"]}"#,
            r#"{"require_namespaces": true, "namespaces": false}"#,
            r#"{"require_landlock": true, "unsafe_no_isolation": true}"#,
        ] {
            assert!(SandboxConfig::from_json(json).is_err(), "{json} accepted");
        }
        let cfg = SandboxConfig { timeout_s: f64::NAN, ..Default::default() };
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn python_is_resolved_or_refused() {
        let cfg = SandboxConfig { python: Some("/nonexistent/python".into()), ..Default::default() };
        assert!(cfg.resolve_python().is_err());
        let cfg = SandboxConfig { python: Some("/bin/sh".into()), ..Default::default() };
        assert!(cfg.resolve_python().unwrap().is_absolute());
    }
}
