//! Task-level tests: config checks, step rules and rewards, the rule "Sudoku givens are binding",
//! snapshots, determinism.

use super::*;
use crate::task::Task;

fn cfg(size: u32, clues: Option<u32>) -> SudokuConfig {
    SudokuConfig { size, clues }
}

fn common() -> Common {
    Common::default()
}

fn step(s: &mut Sudoku, text: &str) -> Outcome {
    s.step(&common(), Some(text), &mut Scratch::default())
}

fn cell_of(s: &Sudoku, pred: impl Fn(usize) -> bool) -> usize {
    (0..s.geo.cells()).find(|&i| pred(i)).unwrap()
}

#[test]
fn config_defaults_and_ranges() {
    let d = SudokuConfig::default();
    assert_eq!((d.size, d.clues, d.target_clues()), (4, None, 6));
    assert_eq!(cfg(9, None).target_clues(), 30);
    let c = common();
    assert!(Sudoku::check_config(&d, &c).is_ok());
    for (size, clues) in [(4, Some(4)), (4, Some(15)), (9, Some(17)), (9, Some(80)), (9, None)] {
        assert!(Sudoku::check_config(&cfg(size, clues), &c).is_ok(), "{size} {clues:?}");
    }
    for (size, clues) in [(5, None), (16, None), (0, None), (4, Some(3)), (4, Some(16)), (9, Some(16)), (9, Some(81))] {
        let err = Sudoku::check_config(&cfg(size, clues), &c).unwrap_err();
        assert!(matches!(err, EnvError::InvalidConfig { task: "sudoku", .. }), "{err}");
    }
    let parsed: SudokuConfig = serde_json::from_str(r#"{"size": 9}"#).unwrap();
    assert_eq!(parsed, cfg(9, None));
    assert!(serde_json::from_str::<SudokuConfig>(r#"{"size": 9, "holes": 3}"#).is_err());
    assert!(Sudoku::generate(&cfg(5, None), 0, Split::Train).is_err());
}

/// Same (seed, split) as the Python reference test `test_golden_puzzles`: both languages must print
/// these exact boards.
#[test]
fn golden_puzzles() {
    let show = |size, seed, split| {
        let mut s = String::new();
        Sudoku::generate(&cfg(size, None), seed, split).unwrap().render(&mut s);
        s
    };
    assert_eq!(show(4, 0, Split::Train), GOLDEN_4_TRAIN_0);
    assert_eq!(show(4, 7, Split::Eval), GOLDEN_4_EVAL_7);
    assert_eq!(show(9, 1, Split::Train), GOLDEN_9_TRAIN_1);
}

const GOLDEN_4_TRAIN_0: &str = ". 1 . 2\n. 4 . .\n. 3 . 4\n. . 1 .";
const GOLDEN_4_EVAL_7: &str = ". 3 2 .\n1 . . .\n2 . . .\n3 . 4 .";
const GOLDEN_9_TRAIN_1: &str = "3 . . 5 . . 1 . .\n. . . 8 4 . . . .\n. . 2 . . 1 6 . 5\n\
                                 1 8 5 . 3 . . . .\n7 2 . . . 5 . 3 9\n. 9 . . . . . . .\n\
                                 4 . 8 . . . . . 7\n. 3 . 7 8 6 2 . .\n. 6 . . 5 . . . 8";

#[test]
fn generated_state_is_consistent() {
    for (size, seeds) in [(4, 50u64), (9, 10)] {
        for seed in 0..seeds {
            let s = Sudoku::generate(&cfg(size, None), seed, Split::Eval).unwrap();
            let target = cfg(size, None).target_clues() as usize;
            assert_eq!(s.optimal_len() as usize, s.geo.cells() - target);
            assert!(!s.is_solved());
            let mut text = String::new();
            s.render(&mut text);
            assert_eq!(text.matches('.').count(), s.optimal_len() as usize);
            assert_eq!(text.lines().count(), size as usize);
        }
    }
}

#[test]
fn solve_answer_solves_from_any_state() {
    for (size, seed) in [(4, 3u64), (9, 3)] {
        let mut s = Sudoku::generate(&cfg(size, None), seed, Split::Train).unwrap();
        // Scribble a wrong digit first: the grid answer overwrites it.
        let empty = cell_of(&s, |i| s.givens[i] == 0);
        s.board[empty] = s.solution[empty] % size as u8 + 1;
        let answer = s.solve().unwrap();
        assert!(answer.starts_with("####\n"));
        let out = step(&mut s, &answer);
        assert!(out.solved && out.valid && !out.failed, "{out:?}");
        assert!(s.is_solved());
        // The scribble was wrong, so progress is all empties minus none already correct.
        assert_eq!(out.local, f64::from(s.optimal_len()) / f64::from(s.optimal_len()));
    }
}

#[test]
fn rewards_of_triples() {
    let mut s = Sudoku::generate(&cfg(4, None), 11, Split::Train).unwrap();
    let e = f64::from(s.empty_start);
    let side = 4;
    let empty = cell_of(&s, |i| s.givens[i] == 0);
    let given = cell_of(&s, |i| s.givens[i] != 0);
    let rc = |i: usize| (i / side + 1, i % side + 1);
    let (er, ec) = rc(empty);
    let (gr, gc) = rc(given);
    let right = s.solution[empty];
    let wrong = right % 4 + 1;

    // A correct digit: +1/e.
    let out = step(&mut s, &format!("#### ({er}, {ec}, {right})"));
    assert_eq!((out.local, out.valid, out.solved, out.failed), (1.0 / e, true, false, false));
    // Overwriting it with a wrong digit: -1/e (progress can go back).
    let out = step(&mut s, &format!("({er},{ec},{wrong})"));
    assert_eq!((out.local, out.valid), (-1.0 / e, true));
    // Repeating a given is fine; changing it is an invalid move, skipped.
    let g = s.givens[given];
    let out = step(&mut s, &format!("#### ({gr},{gc},{g})"));
    assert_eq!((out.local, out.valid), (0.0, true));
    let out = step(&mut s, &format!("#### ({gr},{gc},{}), ({er},{ec},{right})", g % 4 + 1));
    assert_eq!((out.local, out.valid), (-0.05 + 1.0 / e, false));
    assert_eq!(s.board[given], g);
    // Out-of-range coordinates and values: one penalty each.
    let out = step(&mut s, "#### (0,1,1) (1,5,1) (1,1,0) (1,1,5)");
    assert_eq!((out.local, out.valid), (-0.05 + -0.05 + -0.05 + -0.05, false));
    // Unparseable: the parse penalty, nothing changes.
    let before = s.board;
    for bad in [Some("I think (1,1,1) works"), None, Some("#### 1 2 3")] {
        let out = s.step(&common(), bad, &mut Scratch::default());
        assert_eq!(out, Outcome { local: -0.5, solved: false, failed: false, valid: false });
    }
    assert_eq!(s.board, before);
}

#[test]
fn rewards_of_grids() {
    let mut s = Sudoku::generate(&cfg(4, None), 5, Split::Train).unwrap();
    let e = f64::from(s.empty_start);
    // All givens, blanks elsewhere: valid and no change.
    let mut text = String::from("####\n");
    render_grid(s.geo, &s.givens, &mut text);
    let out = step(&mut s, &text);
    assert_eq!((out.local, out.valid), (0.0, true));
    // Every cell blank: allowed (givens stay), nothing gained.
    let out = step(&mut s, "#### . . . . . . . . . . . . . . . .");
    assert_eq!((out.local, out.valid), (0.0, true));
    // The solution with one given replaced by a different digit: one penalty, everything else applied.
    let given = cell_of(&s, |i| s.givens[i] != 0);
    let mut grid = s.solution;
    grid[given] = grid[given] % 4 + 1;
    let answer = format_grid(s.geo, &grid);
    let out = step(&mut s, &answer);
    assert_eq!((out.local, out.valid, out.solved), (-0.05 + e / e, false, true));
}

/// python/atgrpo/ALGORITHM.md, rule "Sudoku givens are binding": a complete, valid board that contradicts a
/// given is never solved.
#[test]
fn valid_board_contradicting_givens_is_not_solved() {
    for size in [4u32, 9] {
        let mut s = Sudoku::generate(&cfg(size, None), 1, Split::Train).unwrap();
        // Relabel digits 1 <-> 2 of the solution: still a valid full grid, but every given 1 or 2
        // is contradicted.
        let mut relabelled = s.solution;
        for d in relabelled.iter_mut() {
            *d = match *d {
                1 => 2,
                2 => 1,
                d => d,
            };
        }
        assert!(is_complete_valid(s.geo, &relabelled));
        assert!((0..s.geo.cells()).any(|i| s.givens[i] != 0 && s.givens[i] != relabelled[i]));
        s.board = relabelled;
        assert!(!s.is_solved(), "{size}x{size}");
        s.board = s.solution;
        assert!(s.is_solved());
        // Through `step` the givens cannot even be changed: the relabelled grid is rejected cell by cell.
        let mut t = Sudoku::generate(&cfg(size, None), 1, Split::Train).unwrap();
        let answer = format_grid(t.geo, &relabelled);
        let out = step(&mut t, &answer);
        assert!(!out.solved && !out.valid);
        assert!(!t.is_solved());
    }
}

#[test]
fn snapshot_round_trip() {
    let mut s = Sudoku::generate(&cfg(9, None), 2, Split::Train).unwrap();
    step(&mut s, "#### (1,1,1) (9,9,9)");
    let mut w = Writer::default();
    s.encode(&mut w);
    let mut r = Reader::new(&w.bytes);
    let t = Sudoku::decode(&cfg(9, None), &mut r).unwrap();
    r.finish().unwrap();
    assert_eq!((t.givens, t.board, t.solution, t.empty_start), (s.givens, s.board, s.solution, s.empty_start));
    assert_eq!(t.board_text(), s.board_text());
}

#[test]
fn snapshot_rejects_hostile_bytes() {
    let s = Sudoku::generate(&cfg(4, None), 2, Split::Train).unwrap();
    let mut w = Writer::default();
    s.encode(&mut w);
    let good = w.bytes;
    let decode = |bytes: &[u8], c: &SudokuConfig| {
        let mut r = Reader::new(bytes);
        Sudoku::decode(c, &mut r).and_then(|t| r.finish().map(|_| t))
    };
    assert!(decode(&good, &cfg(4, None)).is_ok());
    assert!(matches!(decode(&good, &cfg(9, None)), Err(EnvError::Snapshot(_))), "size mismatch");
    // Layout: size(1) | mask len(4) + 16 | board len(4) + 16 | solution len(4) + 16 | empty(1).
    let (mask, board, solution, empty) = (5, 25, 45, 61);
    assert_eq!(good.len(), 62);
    let given = (0..16).find(|&i| good[mask + i] == 1).unwrap();
    let free = (0..16).find(|&i| good[mask + i] == 0).unwrap();
    let mut cases: Vec<Vec<u8>> = Vec::new();
    let mut edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        cases.push(b);
    };
    edit(&|b| b[mask + free] = 2); // mask value not 0/1
    edit(&|b| b[board + free] = 5); // digit out of range
    edit(&|b| b[solution] = 9); // digit out of range
    edit(&|b| b.swap(solution, solution + 1)); // solution not a valid grid
    edit(&|b| b[board + given] = b[board + given] % 4 + 1); // given differs from the solution
    edit(&|b| b[empty] += 1); // wrong empty count
    edit(&|b| b[mask + given] = 0); // fewer givens: count no longer matches
    edit(&|b| {
        // No givens at all, count fixed: consistent, but 288 solutions instead of one.
        b[mask..mask + 16].fill(0);
        b[empty] = 16;
    });
    edit(&|b| b[1] = 17); // mask length
    edit(&|b| b.truncate(30));
    edit(&|b| b.push(0)); // trailing byte (caught by `finish`)
    for (i, bad) in cases.iter().enumerate() {
        assert!(matches!(decode(bad, &cfg(4, None)), Err(EnvError::Snapshot(_))), "case {i}");
    }
    // Every truncation and every single-byte value fails cleanly or decodes to a consistent state.
    for n in 0..good.len() {
        assert!(decode(&good[..n], &cfg(4, None)).is_err());
    }
    for pos in 0..good.len() {
        for v in [0u8, 1, 2, 4, 5, 255] {
            let mut b = good.clone();
            b[pos] = v;
            if let Ok(t) = decode(&b, &cfg(4, None)) {
                assert!(t.givens[..16].iter().zip(&t.solution[..16]).all(|(&g, &x)| g == 0 || g == x));
            }
        }
    }
}

#[test]
fn episode_through_the_pool() {
    use crate::pool::{Pool, StepColumns, TextColumn};
    let c = Common { max_steps: 2, ..Common::default() };
    let mut pool = Pool::<Sudoku>::new(2, cfg(4, None), c).unwrap();
    let mut obs = TextColumn::default();
    pool.reset(&[0, 1], &[9, 9], Split::Train, &mut obs).unwrap();
    let (plans, lens) = pool.solve(&[0]).unwrap();
    assert_eq!(lens, vec![10]);
    let plan = plans[0].clone().unwrap();
    let mut out = StepColumns::default();
    pool.step(&[0, 1], &[Some(plan.as_str()), Some("no idea")], &mut out).unwrap();
    assert_eq!(out.success, vec![true, false]);
    assert_eq!(out.reward, vec![1.0 + 1.0, -0.5]);
    assert_eq!(out.done, vec![true, false]);
    let mut out = StepColumns::default();
    pool.step(&[1], &[Some("#### (1,1,1)")], &mut out).unwrap();
    // The turn limit ends the episode as a failure, never a success (rule "Truncation is failure").
    assert_eq!((out.done[0], out.success[0], out.truncated[0]), (true, false, true));
}
