//! End-to-end runs of real programs (needs `python3` on PATH, as the rest of the project does).

use atgrpo_sandbox::{Program, Sandbox, SandboxConfig, StdioCase, Verdict};

fn sandbox(namespaces: bool) -> Sandbox {
    let cfg = SandboxConfig { workers: 2, timeout_s: 2.0, namespaces, ..Default::default() };
    Sandbox::new(cfg).expect("sandbox")
}

fn function(code: &str, tests: &[&str]) -> Program {
    Program::Function { code: code.into(), setup: String::new(), tests: tests.iter().map(|t| t.to_string()).collect() }
}

fn verdicts(s: &Sandbox, p: Program) -> Vec<Verdict> {
    s.run_batch(vec![p]).unwrap().remove(0).tests.iter().map(|t| t.verdict).collect()
}

#[test]
fn asserts_run_in_one_interpreter_with_a_verdict_each() {
    for ns in [true, false] {
        let s = sandbox(ns);
        let p = function(
            "def f(x):\n    return x * 2\n",
            &["assert f(2) == 4", "assert f(2) == 5", "f(None) + 1", "assert f(0) == 0"],
        );
        let r = s.run_batch(vec![p]).unwrap().remove(0);
        let v: Vec<Verdict> = r.tests.iter().map(|t| t.verdict).collect();
        assert_eq!(
            v,
            [Verdict::Passed, Verdict::WrongAnswer, Verdict::RuntimeError, Verdict::Passed],
            "{:?}",
            s.isolation()
        );
        assert_eq!(r.starts, 1);
        assert!(r.tests[2].stderr_tail.contains("TypeError"), "{:?}", r.tests[2]);
    }
}

#[test]
fn stdio_cases_are_compared_in_the_host() {
    let s = sandbox(true);
    let case = |i: &str, o: Option<&str>| StdioCase {
        stdin: i.as_bytes().to_vec(),
        expected: o.map(|o| o.as_bytes().to_vec()),
    };
    let p = Program::Stdio {
        code: "a, b = map(int, input().split())\nprint(a + b)\n".into(),
        cases: vec![case("1 2\n", Some("3\n")), case("2 2", Some("5")), case("x", Some("1")), case("5 5", None)],
    };
    let r = s.run_batch(vec![p]).unwrap().remove(0);
    let v: Vec<Verdict> = r.tests.iter().map(|t| t.verdict).collect();
    assert_eq!(v, [Verdict::Passed, Verdict::WrongAnswer, Verdict::RuntimeError, Verdict::Passed]);
    assert_eq!(r.tests[3].stdout, b"10\n");
}

#[test]
fn a_timeout_restarts_the_interpreter_for_the_remaining_tests() {
    let s = Sandbox::new(SandboxConfig { timeout_s: 0.5, ..Default::default() }).unwrap();
    let p = function("import time\n", &["assert 1", "time.sleep(30)", "assert 2"]);
    let r = s.run_batch(vec![p]).unwrap().remove(0);
    let v: Vec<Verdict> = r.tests.iter().map(|t| t.verdict).collect();
    assert_eq!(v, [Verdict::Passed, Verdict::Timeout, Verdict::Passed]);
    assert_eq!(r.starts, 2);
}

#[test]
fn a_program_that_fails_to_load_fails_every_test_once() {
    let s = sandbox(true);
    assert_eq!(
        verdicts(&s, function("def f(:\n", &["assert 1", "assert 2"])),
        [Verdict::RuntimeError, Verdict::RuntimeError]
    );
    let r = s.run_batch(vec![function("while True: pass\n", &["assert 1", "assert 2"])]).unwrap().remove(0);
    assert_eq!(r.tests.iter().map(|t| t.verdict).collect::<Vec<_>>(), [Verdict::Timeout, Verdict::Timeout]);
    assert_eq!(r.starts, 1);
}

#[test]
fn bad_programs_and_closed_sandboxes_are_errors() {
    let s = sandbox(true);
    assert!(s.run_batch(vec![function("x=1", &[])]).is_err());
    s.close();
    assert!(s.run_batch(vec![function("x=1", &["assert x"])]).is_err());
}

#[test]
fn the_isolation_report_says_what_was_not_available() {
    let s = sandbox(true);
    let r = s.isolation();
    eprintln!("{}", serde_json::to_string_pretty(r).unwrap());
    match r.mode {
        "namespaces" => {
            assert!(r.per_execution_namespaces && r.shared_namespaces);
            let root = unsafe { libc::geteuid() } == 0;
            assert_eq!(r.child_processes, !(root && r.seccomp));
        }
        "fallback" => assert!(r.warning.is_some() && !r.child_processes),
        other => panic!("mode {other}"),
    }
    let forced = sandbox(false);
    assert_eq!(forced.isolation().mode, "fallback");
    assert!(forced.isolation().warning.as_deref().unwrap_or("").contains("disabled by config"));
}

/// Keeps up to 100 children alive: they must stop at `max_processes` (RLIMIT_NPROC per execution)
/// or, where children cannot be counted (root, no namespaces), be refused outright.
#[test]
fn child_processes_are_bounded_or_refused() {
    let python = std::env::var("ATGRPO_TEST_PYTHON").ok();
    let cfg = SandboxConfig { max_processes: 8, timeout_s: 5.0, python, ..Default::default() };
    let s = Sandbox::new(cfg).unwrap();
    let code = "import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print(n, type(e).__name__)\n";
    let p = Program::Stdio { code: code.into(), cases: vec![StdioCase { stdin: vec![], expected: None }] };
    let r = s.run_batch(vec![p]).unwrap().remove(0);
    let out = String::from_utf8_lossy(&r.tests[0].stdout).to_string();
    eprintln!("{} children_allowed={} -> {out:?}", s.isolation().mode, s.isolation().child_processes);
    if s.isolation().child_processes {
        let n: usize = out.split_whitespace().next().unwrap().parse().unwrap();
        assert!(n < 8 && out.contains("BlockingIOError"), "{out:?}");
    } else {
        assert_eq!(out.trim(), "0 PermissionError");
    }
}

/// A grandchild that detaches (setsid) must be dead once the verdict is in: with namespaces the
/// kernel kills the pid namespace; where children are refused it never exists.
#[test]
fn a_detached_grandchild_is_dead_after_the_verdict() {
    let python = std::env::var("ATGRPO_TEST_PYTHON").ok();
    let s = Sandbox::new(SandboxConfig { timeout_s: 5.0, python, ..Default::default() }).unwrap();
    let marker = format!("atgrpo-rust-grandchild-{}", std::process::id());
    let code = format!(
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'])\n    os._exit(0)\ntime.sleep(0.3)\nprint('ok')\n"
    );
    let p = Program::Stdio { code, cases: vec![StdioCase { stdin: vec![], expected: Some(b"ok".to_vec()) }] };
    let t = s.run_batch(vec![p]).unwrap().remove(0).tests.remove(0);
    let expected = if s.isolation().child_processes { Verdict::Passed } else { Verdict::RuntimeError };
    assert_eq!(t.verdict, expected, "{t:?}");
    let alive: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat.rsplit(')').next()?.split_whitespace().next()? == "Z";
            (!zombie && String::from_utf8_lossy(&cmd).contains(&marker))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(alive.is_empty(), "grandchildren still alive: {alive:?}");
}

#[test]
fn function_verdicts_come_from_a_checker_the_program_cannot_reach() {
    for ns in [true, false] {
        let s = sandbox(ns);
        // The program searches its whole interpreter for the harness's nonce and reporting pipe.
        let code = "import gc, os\nclass A:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    for o in gc.get_objects():\n        if isinstance(o, bytearray) and len(o) == 16:\n            os.write(4, bytes(o) + b'E' + bytes(8))\n    return A()\ndef g(x):\n    return x + 1\n";
        let p = function(code, &["assert f(1) == 2", "assert g(1) == 2"]);
        assert_eq!(verdicts(&s, p), [Verdict::UnsupportedValue, Verdict::Passed], "{:?}", s.isolation());
    }
}

#[test]
fn a_forged_record_past_the_last_test_is_a_protocol_error_not_a_panic() {
    // A stdio program shares the harness's interpreter, so it can call `send` with any index.
    let code = "import sys\nf = sys._getframe()\nwhile 'send' not in f.f_locals:\n    f = f.f_back\nfor i in range(5):\n    f.f_locals['send'](b'E', i, bytes(1))\n";
    let case = || StdioCase { stdin: Vec::new(), expected: Some(b"ok".to_vec()) };
    for ns in [true, false] {
        let s = sandbox(ns);
        for n in [1, 2] {
            let r = s
                .run_batch(vec![Program::Stdio { code: code.into(), cases: (0..n).map(|_| case()).collect() }])
                .unwrap()
                .remove(0);
            let v: Vec<Verdict> = r.tests.iter().map(|t| t.verdict).collect();
            assert_eq!(v, vec![Verdict::WrongAnswer; n], "{:?}", r.tests);
        }
    }
}
