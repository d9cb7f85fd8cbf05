//! A kernel without Landlock or without user namespaces (simulated: `Sandbox::with_kernel` with the
//! feature taken away from the probe's answer) is named in the report, typed (`Missing`) and in the
//! warning, or refused with `require_namespaces`; never accepted without a word. Programs still run.

use atgrpo_sandbox::{KernelFeatures, Missing, Program, Sandbox, SandboxConfig, SandboxError, Verdict};

fn cfg() -> SandboxConfig {
    SandboxConfig { workers: 1, timeout_s: 5.0, ..Default::default() }
}

fn passes(s: &Sandbox) {
    let p = Program::Function { code: "def f(x):\n    return x + 1\n".into(), setup: String::new(), tests: vec!["assert f(1) == 2".into()] };
    let r = s.run_batch(vec![p]).unwrap().remove(0);
    assert_eq!(r.tests[0].verdict, Verdict::Passed, "{:?}", r.tests[0]);
}

#[test]
fn the_probe_reports_this_kernel_and_full_isolation_has_nothing_missing() {
    let real = KernelFeatures::probe();
    let s = Sandbox::with_kernel(cfg(), real).unwrap();
    let r = s.isolation();
    assert_eq!(r.landlock_abi, real.landlock_abi);
    assert_eq!(r.missing.is_empty(), r.warning.is_none(), "{r:?}");
}

#[test]
fn no_landlock_is_a_typed_warning_on_both_paths() {
    let kernel = KernelFeatures { landlock_abi: 0, ..KernelFeatures::probe() };
    for namespaces in [true, false] {
        let s = Sandbox::with_kernel(SandboxConfig { namespaces, ..cfg() }, kernel).unwrap();
        let r = s.isolation();
        assert_eq!(r.landlock_abi, 0);
        assert!(r.missing.contains(&Missing::Landlock), "{r:?}");
        assert!(r.warning.as_deref().unwrap_or("").contains("no Landlock"), "{r:?}");
        let json = serde_json::to_value(r).unwrap();
        assert!(json["missing"].as_array().unwrap().iter().any(|m| m == "landlock"), "{json}");
        passes(&s);
    }
}

#[test]
fn no_user_namespaces_is_a_typed_warning_or_an_error_when_required() {
    let kernel = KernelFeatures { user_namespaces: false, ..KernelFeatures::probe() };
    let s = Sandbox::with_kernel(cfg(), kernel).unwrap();
    let r = s.isolation();
    assert_eq!(r.mode, "fallback");
    assert!(r.missing.contains(&Missing::Namespaces), "{r:?}");
    assert!(r.warning.as_deref().unwrap_or("").contains("user namespaces unavailable"), "{r:?}");
    passes(&s);
    match Sandbox::with_kernel(SandboxConfig { require_namespaces: true, ..cfg() }, kernel) {
        Err(SandboxError::Unavailable(why)) => assert!(why.contains("user namespaces unavailable"), "{why}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(s) => panic!("accepted without namespaces: {:?}", s.isolation()),
    }
}

#[test]
fn neither_is_reported_as_both() {
    let kernel = KernelFeatures { user_namespaces: false, landlock_abi: 0, ..KernelFeatures::probe() };
    let s = Sandbox::with_kernel(cfg(), kernel).unwrap();
    let r = s.isolation();
    assert!(r.missing.contains(&Missing::Namespaces) && r.missing.contains(&Missing::Landlock), "{r:?}");
    passes(&s);
}
