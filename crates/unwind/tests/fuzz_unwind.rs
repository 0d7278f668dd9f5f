//! Robustness of DWARF unwinding against corrupt unwind sections and garbage stacks, on stable:
//! the input generation of the cargo-fuzz target (`fuzz/fuzz_targets/unwind_sections.rs`) run
//! over a few thousand pseudo-random inputs from a fixed seed. Every call must return (no panic,
//! no hang: within a time bound and at most `MAX_FRAMES` frames), and garbage must end the stack
//! early (`Unknown` or `Truncated`), never as a whole stack of made-up frames.

#[path = "support/fuzz_input.rs"]
mod fuzz_input;

use std::time::{Duration, Instant};

use fuzz_input::{template, template_frames, Harness, Input, MAP_START, TEMPLATE_FUNCS};
use unwind::{StackEnd, MAX_FRAMES};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Per-call bound: generous (a debug build, a fresh file and ELF parse per call), far below a
/// hang.
const CALL_LIMIT: Duration = Duration::from_secs(2);

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-fuzz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

fn check(h: &mut Harness, input: &Input, what: &str) -> (Vec<u64>, StackEnd) {
    let t = Instant::now();
    let (frames, end) = h.unwind(input);
    let took = t.elapsed();
    assert!(
        took <= CALL_LIMIT,
        "{what}: unwinding took {took:?}\n{input:?}"
    );
    assert!(
        frames.len() <= MAX_FRAMES,
        "{what}: {} frames (> MAX_FRAMES)",
        frames.len()
    );
    if frames.len() == MAX_FRAMES {
        assert_eq!(
            end,
            StackEnd::Truncated,
            "{what}: cut at MAX_FRAMES but not Truncated"
        );
    }
    if let Some(&first) = frames.first() {
        assert_eq!(
            first, input.regs.ip,
            "{what}: the first frame is not the sampled ip"
        );
    }
    assert_ne!(
        end,
        StackEnd::NoUserStack,
        "{what}: NoUserStack from unwind()"
    );
    (frames, end)
}

/// Runs `check`, turning a panic into an error string (so one run reports every failing case).
fn try_check(h: &mut Harness, input: &Input, what: &str) -> Result<(Vec<u64>, StackEnd), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(h, input, what))).map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{what}: panicked: {msg}")
    })
}

/// The harness works: the uncorrupted template unwinds whole, with exactly the expected frames;
/// a copy cut short is Truncated with the frames it holds.
/// A stack counts as whole only where the call-frame information marks its end (the return
/// address undefined, as at `_start`), not wherever unwinding stops: a zero return address in
/// the middle of the stack (what corrupt `.eh_frame` pointing at the wrong slot reads), a zero
/// frame pointer under a frame-pointer rule, and an outermost function whose CFI does not mark
/// the end all leave the stack's end unknown, with the frames found so far.
#[test]
fn a_stack_that_just_stops_is_not_whole() {
    let dir = scratch("stops");
    let mut h = Harness::new(&dir);
    let depth = 6;
    // Frame k's [saved rbp, return address] is at stack offset 16 * (depth - 1 - k).
    let word = |k: usize, i: usize| 16 * (depth - 1 - k) + 8 * i;
    let zero = |stack: &mut Vec<u8>, at: usize| stack[at..at + 8].fill(0);

    let mut zero_return = template(depth);
    zero(&mut zero_return.stack, word(3, 1));
    let (frames, end) = check(&mut h, &zero_return, "zero return address");
    assert_eq!(end, StackEnd::Unknown, "zero return address: {frames:x?}");
    assert_eq!(
        frames,
        template_frames(depth)[..3],
        "the frames before it are kept"
    );

    let mut zero_fp = template(depth);
    zero(&mut zero_fp.stack, word(3, 0));
    let (frames, end) = check(&mut h, &zero_fp, "zero frame pointer");
    assert_eq!(end, StackEnd::Unknown, "zero frame pointer: {frames:x?}");

    // f0's FDE without its `undefined r16`: the zero return address above it ends the walk,
    // and nothing says that is the end.
    let mut unmarked = template(depth);
    let marker = unmarked
        .eh_frame
        .windows(3)
        .position(|w| w == [0x07, 0x10, 0x41])
        .expect("f0's undefined r16");
    unmarked.eh_frame[marker] = 0x00; // DW_CFA_nop
    unmarked.eh_frame[marker + 1] = 0x00;
    let (frames, end) = check(&mut h, &unmarked, "unmarked outermost frame");
    assert_eq!(
        end,
        StackEnd::Unknown,
        "unmarked outermost frame: {frames:x?}"
    );
    assert_eq!(frames, template_frames(depth));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn template_unwinds_whole_and_cut_copies_truncate() {
    let dir = scratch("template");
    let mut h = Harness::new(&dir);
    for depth in [1, 2, 5, TEMPLATE_FUNCS] {
        let input = template(depth);
        let (frames, end) = check(&mut h, &input, "template");
        assert_eq!(
            end,
            StackEnd::Complete,
            "template depth {depth}: {frames:x?}"
        );
        assert_eq!(frames, template_frames(depth), "template depth {depth}");
    }
    let depth = TEMPLATE_FUNCS;
    let mut cut = template(depth);
    cut.stack.truncate(16 * 10);
    let (frames, end) = check(&mut h, &cut, "cut template");
    assert_eq!(end, StackEnd::Truncated, "cut copy: {frames:x?}");
    assert_eq!(frames, template_frames(depth)[..frames.len()]);
    assert!(
        frames.len() >= 10,
        "cut copy unwound only {} frames",
        frames.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_sections_and_garbage_stacks_end_early_without_panicking() {
    let dir = scratch("random");
    let mut h = Harness::new(&dir);
    let mut rng = Rng(0x005e_ed0f_u64 ^ 0x9e37_79b9_7f4a_7c15);
    let mut ends = [0u32; 5];
    let mut failures: Vec<String> = Vec::new();
    let idx = |e: StackEnd| match e {
        StackEnd::Complete => 0,
        StackEnd::Spliced => 1,
        StackEnd::Truncated => 2,
        StackEnd::Unknown => 3,
        StackEnd::NoUserStack | StackEnd::FramePointer => 4,
    };
    for i in 0..3000u32 {
        match i % 4 {
            // Fuzzer-style bytes: raw sections or edits to the template, as the fuzz target.
            0 | 1 => {
                let n = (rng.next() % 600) as usize;
                let mut data = rng.bytes(n);
                if i % 4 == 1 && !data.is_empty() {
                    data[0] |= 1; // template with edits
                }
                let input = Input::from_bytes(&data);
                let what = format!("input {i}: Input::from_bytes(&{data:02x?})");
                match try_check(&mut h, &input, &what) {
                    Ok((_, end)) => ends[idx(end)] += 1,
                    Err(e) => failures.push(e),
                }
            }
            // The template's CFI with corrupt .eh_frame / .eh_frame_hdr bytes: whatever it
            // unwinds, no panic, no hang, the bounds hold.
            2 => {
                let depth = 1 + (rng.next() as usize) % TEMPLATE_FUNCS;
                let mut input = template(depth);
                for _ in 0..1 + rng.next() % 8 {
                    let t = if rng.next() % 2 == 0 {
                        &mut input.eh_frame
                    } else {
                        &mut input.eh_frame_hdr
                    };
                    let at = (rng.next() as usize) % t.len();
                    t[at] ^= 1 + (rng.next() % 255) as u8;
                }
                let what = format!(
                    "corrupt sections {i}: eh_frame {:02x?} eh_frame_hdr {:02x?}",
                    input.eh_frame, input.eh_frame_hdr
                );
                match try_check(&mut h, &input, &what) {
                    Ok((_, end)) => ends[idx(end)] += 1,
                    Err(e) => failures.push(e),
                }
            }
            // Garbage stacks (no zero word, so no return address can end the stack) under the
            // template's valid CFI: must end early, never as a whole stack.
            _ => {
                // Sampled outside f0 (the outermost function, where the stack really ends).
                let depth = 2 + (rng.next() as usize) % (TEMPLATE_FUNCS - 1);
                let mut input = template(depth);
                let words = 1 + (rng.next() % 512) as usize;
                input.stack = (0..words)
                    .flat_map(|_| {
                        let w = match rng.next() % 4 {
                            // pointers into the code, the stack or anywhere
                            // (not into f0, whose CFI marks the end of the stack)
                            0 => MAP_START + 0x1011 + rng.next() % 0x1ef,
                            1 => input.regs.sp + rng.next() % 0x2000,
                            _ => rng.next(),
                        };
                        w.max(1).to_le_bytes()
                    })
                    .collect();
                match try_check(&mut h, &input, &format!("garbage stack {i}")) {
                    Ok((frames, end)) => {
                        ends[idx(end)] += 1;
                        if !matches!(end, StackEnd::Unknown | StackEnd::Truncated) {
                            failures.push(format!(
                                "garbage stack {i}: ended {end:?} after {} frames {frames:x?}\n\
                                 regs {:x?}\nstack {:x?}",
                                frames.len(),
                                input.regs,
                                input.stack
                            ));
                        }
                    }
                    Err(e) => failures.push(e),
                }
            }
        }
    }
    eprintln!(
        "ends: complete {} spliced {} truncated {} unknown {} no-user-stack {}",
        ends[0], ends[1], ends[2], ends[3], ends[4]
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of 3000 inputs failed; the first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(3)
            .map(|f| format!("- {}", &f[..f.len().min(4000)]))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        ends[1] + ends[4],
        0,
        "unwind() never splices nor says NoUserStack"
    );
}
