//! A kernel without Landlock, with an older Landlock ABI, or without user namespaces (simulated:
//! `Sandbox::with_kernel` with the feature taken away from the probe's answer) is named in the
//! report, typed (`Missing`) and in the warning, or refused with `require_namespaces` /
//! `require_landlock`; never accepted without a word. Programs still run.

use atgrpo_sandbox::{landlock_gaps, KernelFeatures, Missing, Program, Sandbox, SandboxConfig, SandboxError, Verdict};

fn cfg() -> SandboxConfig {
    SandboxConfig { workers: 1, timeout_s: 5.0, ..Default::default() }
}

fn passes(s: &Sandbox) {
    let p = Program::Function {
        code: "def f(x):\n    return x + 1\n".into(),
        setup: String::new(),
        tests: vec!["assert f(1) == 2".into()],
    };
    let r = s.run_batch(vec![p]).unwrap().remove(0);
    assert_eq!(r.tests[0].verdict, Verdict::Passed, "{:?}", r.tests[0]);
}

/// The Landlock entries of a report's `missing`.
fn landlock_missing(missing: &[Missing]) -> Vec<Missing> {
    missing
        .iter()
        .copied()
        .filter(|m| !matches!(m, Missing::Namespaces | Missing::Seccomp | Missing::ReadonlyRoot))
        .collect()
}

#[test]
fn the_report_names_exactly_the_landlock_layers_this_kernel_lacks_and_warns_whenever_any_is_missing() {
    let real = KernelFeatures::probe();
    let s = Sandbox::with_kernel(cfg(), real).unwrap();
    let r = s.isolation();
    assert_eq!(r.landlock_abi, real.landlock_abi);
    let expected: Vec<Missing> = landlock_gaps(real.landlock_abi).into_iter().map(|(m, _)| m).collect();
    assert_eq!(landlock_missing(&r.missing), expected, "{r:?}");
    assert_eq!(r.missing.is_empty(), r.warning.is_none(), "{r:?}");
}

#[test]
fn an_older_landlock_abi_names_each_layer_it_lacks_or_is_refused_when_required() {
    // ABI 3 (Linux 6.2..6.6): a file fence with truncate, but no TCP rule, device-ioctl fence or
    // signal scope. Before, only "no Landlock at all" was reported (and scopes on the fallback).
    let kernel = KernelFeatures { landlock_abi: 3, ..KernelFeatures::probe() };
    for namespaces in [true, false] {
        let s = Sandbox::with_kernel(SandboxConfig { namespaces, ..cfg() }, kernel).unwrap();
        let r = s.isolation();
        assert_eq!(r.landlock_abi, 3);
        let lacking = landlock_missing(&r.missing);
        assert_eq!(lacking, [Missing::LandlockTcp, Missing::LandlockIoctlDev, Missing::LandlockScopes], "{r:?}");
        let warning = r.warning.as_deref().unwrap_or("");
        assert!(warning.contains("TCP") && warning.contains("signal"), "{r:?}");
        let json = serde_json::to_value(r).unwrap();
        assert!(json["missing"].as_array().unwrap().iter().any(|m| m == "landlock_tcp"), "{json}");
        passes(&s);
    }
    match Sandbox::with_kernel(SandboxConfig { require_landlock: true, ..cfg() }, kernel) {
        Err(SandboxError::Unavailable(why)) => {
            assert!(why.contains("require_landlock") && why.contains("TCP"), "{why}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(s) => panic!("accepted with Landlock ABI 3: {:?}", s.isolation()),
    }
    // The full ABI is accepted under the same requirement (where this kernel has it).
    if KernelFeatures::probe().landlock_abi >= 6 {
        Sandbox::with_kernel(SandboxConfig { require_landlock: true, ..cfg() }, KernelFeatures::probe()).unwrap();
    }
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
