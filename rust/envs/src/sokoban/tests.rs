use super::*;

fn config(size: u32, boxes: u32) -> SokobanConfig {
    let mut cfg = SokobanConfig { width: size, height: size, boxes, ..SokobanConfig::default() };
    if size >= 8 {
        cfg.reverse_steps = 100;
        cfg.max_pushes = 60;
        cfg.max_solver_states = 2_000_000;
    }
    cfg
}

#[test]
fn solver_plans_solve_with_the_optimal_push_count() {
    let common = Common::default();
    let mut scratch = Scratch::default();
    for (size, boxes) in [(6, 1), (7, 2), (10, 3)] {
        let cfg = config(size, boxes);
        for seed in 0..20 {
            let mut env = Sokoban::generate(&cfg, seed, Split::Train).unwrap();
            let plan = env.solve().unwrap();
            let mut moves = Vec::new();
            assert!(parse_moves(&plan, 10_000, &mut moves));
            let big = Common { max_moves: 10_000, ..common.clone() };
            let out = env.step(&big, Some(&plan), &mut scratch);
            assert!(out.solved && out.valid && !out.failed, "{size}x{size}/{boxes} seed {seed}");
            let pushes = solve_pushes(&env.level, env.level.start_boxes, env.level.start_player, 2_000_000).unwrap();
            assert_eq!(pushes.len() as u32, env.optimal_len());
            assert!(env.optimal_len() >= cfg.min_pushes && env.optimal_len() <= cfg.max_pushes);
        }
    }
}

#[test]
fn dead_squares_are_corners_not_targets() {
    let env = Sokoban::generate(&config(6, 1), 5, Split::Train).unwrap();
    let level = env.level();
    // Interior corners next to two border walls are dead unless they are targets.
    for cell in [7usize, 10, 25, 28] {
        if !level.walls.has(cell) && !level.targets.has(cell) {
            assert!(level.dead.has(cell), "corner {cell} should be dead");
        }
    }
    assert_eq!(level.dead.and(&level.targets).count(), 0);
}

#[test]
fn pushing_into_a_dead_corner_fails_the_episode() {
    let common = Common::default();
    let mut scratch = Scratch::default();
    let cfg = config(6, 1);
    let mut found = false;
    'seeds: for seed in 0..200 {
        let env = Sokoban::generate(&cfg, seed, Split::Train).unwrap();
        for dir in Dir::ALL {
            for k in 1..4 {
                let mut e = env.clone();
                let text = format!("#### [{}]", vec![dir.letter().to_string(); k].join(","));
                let out = e.step(&common, Some(&text), &mut scratch);
                if out.failed {
                    assert!(!out.solved);
                    assert!(e.level.dead.has(e.boxes.iter().find(|&b| !e.level.targets.has(b)).unwrap()));
                    found = true;
                    break 'seeds;
                }
            }
        }
    }
    assert!(found, "no seed pushed a box into a dead square");
}

#[test]
fn levels_respect_the_config_and_are_deterministic() {
    let cfg = config(8, 2);
    for seed in 0..20 {
        let a = Sokoban::generate(&cfg, seed, Split::Eval).unwrap();
        let b = Sokoban::generate(&cfg, seed, Split::Eval).unwrap();
        assert_eq!(a.level, b.level);
        assert_eq!(a.boxes.count(), 2);
        assert_ne!(a.boxes, a.level.targets);
    }
}
