//! Tests of the process table: arrival orders, pid reuse, forks, execs, pruning, /proc.

use super::names::MIN_NAMES_TO_REBUILD;
use super::*;
use crate::files::MappedFile;
use crate::owner::owner;
use crate::owner::{Owner, UNKNOWN_UID};
use crate::proc_fs::parse_status;
use crate::process::{Mapping, ProcessKey};
use crate::ProcError;
use crate::MAX_MAPPINGS;
use std::collections::HashSet;

fn file(path: &str) -> MappedFile {
    MappedFile::with_path(path)
}

#[test]
fn exec_replaces_the_address_space_whatever_the_arrival_order() {
    let mut t = ProcessTable::new();
    t.add_mapping(10, 0, 0x1000, 0x1000, 0, file("/bin/sh"));
    // The new image's mapping arrives before the exec's comm record.
    t.add_mapping(10, 200, 0x1000, 0x1000, 0, file("/bin/burner"));
    t.set_comm(10, 10, 150, "burner", true);
    let name = |m: Option<&Mapping>| m.map(|m| t.files().get(m.file).path.clone());
    assert_eq!(
        name(t.find_mapping(10, 0x1800, 100)).as_deref(),
        Some("/bin/sh")
    );
    assert_eq!(
        name(t.find_mapping(10, 0x1800, 250)).as_deref(),
        Some("/bin/burner")
    );
    assert_eq!(t.thread_name(10, 10, 160), Some("burner"));
    assert_eq!(
        t.thread_name(10, 10, 100),
        Some("burner"),
        "earliest name stands in"
    );
}

#[test]
fn overlapping_mmap_splits_the_old_mapping() {
    let mut t = ProcessTable::new();
    t.add_mapping(1, 10, 0x1000, 0x3000, 0x100000, file("/a"));
    t.add_mapping(1, 20, 0x2000, 0x1000, 0, file("/b"));
    let f = |addr, time| {
        t.find_mapping(1, addr, time)
            .map(|m| (t.files().get(m.file).path.clone(), m.file_offset(addr)))
    };
    assert_eq!(f(0x2800, 15), Some(("/a".into(), 0x101800)));
    assert_eq!(f(0x2800, 25), Some(("/b".into(), 0x800)));
    assert_eq!(f(0x1800, 25), Some(("/a".into(), 0x100800)));
    assert_eq!(f(0x3800, 25), Some(("/a".into(), 0x102800)));
    assert_eq!(f(0x5000, 25), None);
}

#[test]
fn fork_copies_mappings_and_names() {
    let mut t = ProcessTable::new();
    t.set_comm(5, 5, 0, "parent", false);
    t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/p"));
    t.fork(6, 5, 6, 5, 50);
    t.fork(5, 5, 7, 5, 60);
    assert_eq!(t.thread_name(6, 6, 55), Some("parent"));
    assert_eq!(t.thread_name(5, 7, 65), Some("parent"));
    assert!(t.find_mapping(6, 0x1000, 55).is_some());
    assert_eq!(t.pid_of(7), Some(5));
    t.exit(6, 6, 70);
    assert_eq!(t.prune(100).processes, 1);
    assert!(t.find_mapping(6, 0x1000, 55).is_none());
}

/// Whether the processes on `a` and `b` at `time` share one mapping list.
#[test]
fn a_child_shares_its_parents_mappings_as_of_the_fork() {
    let mut t = table_without_proc();
    t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
    t.add_mapping(5, 2, 0x3000, 0x1000, 0, file("/bin/b"));
    t.fork(6, 5, 6, 5, 50);
    assert_eq!(t.stats().forks_shared, 1);
    assert!(t.shares_mappings(5, 6, 55), "no copy at the fork");
    assert_eq!(file_at(&t, 6, 0x1000, 55).as_deref(), Some("/bin/a"));
    assert_eq!(file_at(&t, 6, 0x3000, 55).as_deref(), Some("/bin/b"));
    assert_eq!(file_at(&t, 6, 0x1000, 49), None, "not before the fork");
    // Later mmaps in the parent (a new range, and one over /bin/a) are not the child's.
    t.add_mapping(5, 60, 0x8000, 0x1000, 0, file("/bin/c"));
    t.add_mapping(5, 61, 0x1000, 0x1000, 0, file("/bin/d"));
    assert!(!t.shares_mappings(5, 6, 70));
    assert_eq!(file_at(&t, 5, 0x8000, 70).as_deref(), Some("/bin/c"));
    assert_eq!(file_at(&t, 5, 0x1000, 70).as_deref(), Some("/bin/d"));
    assert_eq!(file_at(&t, 6, 0x8000, 70), None);
    assert_eq!(file_at(&t, 6, 0x1000, 70).as_deref(), Some("/bin/a"));
    assert_eq!(file_at(&t, 5, 0x1000, 55).as_deref(), Some("/bin/a"));
    // A later mmap in the child is not the parent's.
    t.add_mapping(6, 62, 0x9000, 0x1000, 0, file("/bin/e"));
    assert_eq!(file_at(&t, 6, 0x9000, 70).as_deref(), Some("/bin/e"));
    assert_eq!(file_at(&t, 5, 0x9000, 70), None);
}

#[test]
fn unmapping_in_a_child_leaves_the_parent_alone() {
    let mut t = table_without_proc();
    t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
    t.add_mapping(5, 2, 0x3000, 0x1000, 0, file("/bin/b"));
    t.fork(6, 5, 6, 5, 50);
    t.fork(7, 5, 7, 5, 51);
    assert!(t.shares_mappings(6, 7, 55));
    // Child 6 maps over /bin/b; child 7 execs (its whole address space goes).
    t.add_mapping(6, 60, 0x3000, 0x1000, 0, file("/bin/x"));
    t.set_comm(7, 7, 61, "other", true);
    assert_eq!(file_at(&t, 6, 0x3000, 70).as_deref(), Some("/bin/x"));
    assert_eq!(file_at(&t, 7, 0x1000, 70), None);
    assert_eq!(file_at(&t, 7, 0x1000, 60).as_deref(), Some("/bin/a"));
    for pid in [5, 6] {
        assert_eq!(file_at(&t, pid, 0x1000, 70).as_deref(), Some("/bin/a"));
    }
    assert_eq!(file_at(&t, 5, 0x3000, 70).as_deref(), Some("/bin/b"));
    // Pruning the children (exited) leaves the parent's mappings whole.
    t.exit(6, 6, 80);
    t.exit(7, 7, 81);
    assert_eq!(t.prune(100).processes, 2);
    assert_eq!(file_at(&t, 5, 0x1000, 120).as_deref(), Some("/bin/a"));
    assert_eq!(file_at(&t, 5, 0x3000, 120).as_deref(), Some("/bin/b"));
}

#[test]
fn a_fork_after_out_of_order_records_of_the_parent_copies_what_held_at_the_fork() {
    let mut t = table_without_proc();
    t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
    // Records of the parent from after the fork arrive before it: an mmap over /bin/a
    // and one of a new range.
    t.add_mapping(5, 70, 0x1000, 0x1000, 0, file("/bin/late"));
    t.add_mapping(5, 71, 0x8000, 0x1000, 0, file("/bin/new"));
    t.fork(6, 5, 6, 5, 50);
    assert_eq!(t.stats().forks_shared, 0);
    assert_eq!(file_at(&t, 6, 0x1000, 80).as_deref(), Some("/bin/a"));
    assert_eq!(file_at(&t, 6, 0x8000, 80), None);
    assert_eq!(file_at(&t, 5, 0x1000, 80).as_deref(), Some("/bin/late"));
}

#[test]
fn many_forks_of_a_process_with_many_mappings_share_one_list() {
    let mut t = table_without_proc();
    for i in 0..60_000u64 {
        t.add_mapping(5, 1, 0x10_0000 + i * 0x2000, 0x1000, 0, file("/lib/x"));
    }
    for child in 0..1000u32 {
        let pid = 100 + child;
        let time = 10 + 2 * u64::from(child);
        t.fork(pid, 5, pid, 5, time);
        assert!(t.find_mapping(pid, 0x10_0000, time).is_some());
        t.exit(pid, pid, time + 1);
    }
    assert_eq!(t.stats().forks_shared, 1000);
    assert!(t.shares_mappings(5, 1099, 2008));
    assert_eq!(t.prune(5000).processes, 1000);
    assert_eq!(t.sizes().mappings, 60_000);
}

#[test]
fn mappings_past_the_cap_are_dropped_and_counted() {
    let mut t = table_without_proc();
    for i in 0..(MAX_MAPPINGS as u64 + 5) {
        t.add_mapping(5, 1, 0x10_0000 + i * 0x2000, 0x1000, 0, file("/lib/x"));
    }
    assert_eq!(t.sizes().mappings, MAX_MAPPINGS);
    assert_eq!(t.stats().mappings_dropped, 5);
}

/// The file a sample of `pid` at `addr` and `time` resolves to.
fn file_at(t: &ProcessTable, pid: u32, addr: u64, time: u64) -> Option<String> {
    t.find_mapping(pid, addr, time)
        .map(|m| t.files().get(m.file).path.clone())
}

/// A tiny deterministic generator (no dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

#[derive(Clone, Debug)]
enum Rec {
    Fork(u32, u32, u32, u32, u64),
    Comm(u32, u32, u64, String, bool),
    Mmap(u32, u64, u64, u64, String),
    Exit(u32, u32, u64),
}

fn apply(t: &mut ProcessTable, r: &Rec) {
    match r {
        Rec::Fork(pid, ppid, tid, ptid, time) => t.fork(*pid, *ppid, *tid, *ptid, *time),
        Rec::Comm(pid, tid, time, name, exec) => t.set_comm(*pid, *tid, *time, name, *exec),
        Rec::Mmap(pid, time, start, len, path) => {
            t.add_mapping(*pid, *time, *start, *len, 0, file(path));
        }
        Rec::Exit(pid, tid, time) => t.exit(*pid, *tid, *time),
    }
}

fn table_without_proc() -> ProcessTable {
    ProcessTable {
        read_proc: false,
        ..ProcessTable::new()
    }
}

/// The parent: pid 1, named "init", mapping /bin/init at 0x1000 from the start.
#[test]
fn ancestors_follow_the_forks_not_the_pid_reuse() {
    let mut t = with_parent();
    // 1 -> 10 -> 20 -> 30; then 10 exits and a new process takes pid 10 (from 1).
    t.fork(10, 1, 10, 1, 5);
    t.fork(20, 10, 20, 10, 6);
    t.fork(30, 20, 30, 20, 7);
    assert_eq!(t.parent(30, 8), Some(20));
    assert_eq!(t.ancestors(30, 8, 16), vec![20, 10, 1]);
    assert_eq!(t.ancestors(30, 8, 2), vec![20, 10]);
    t.exit(10, 10, 9);
    t.fork(10, 30, 10, 30, 50);
    // 20 was created by the first process on pid 10, itself created by 1.
    assert_eq!(t.ancestors(20, 60, 16), vec![10, 1]);
    assert_eq!(t.ancestors(10, 60, 16), vec![30, 20, 10, 1]);
    assert!(t.ancestors(1, 60, 16).is_empty());
}

fn with_parent() -> ProcessTable {
    let mut t = table_without_proc();
    t.set_comm(1, 1, 0, "init", false);
    t.add_mapping(1, 0, 0x1000, 0x1000, 0, file("/bin/init"));
    t
}

/// Process A runs /bin/a on pid 100 (with a thread 101), exits; process B forks onto pid
/// 100 and runs /bin/b, a non-PIE binary at the same address.
fn pid_reuse_records() -> Vec<Rec> {
    vec![
        Rec::Fork(100, 1, 100, 1, 10),
        Rec::Comm(100, 100, 20, "a".into(), true),
        Rec::Mmap(100, 21, 0x40_0000, 0x1000, "/bin/a".into()),
        Rec::Fork(100, 100, 101, 100, 30),
        Rec::Comm(100, 101, 31, "a-worker".into(), false),
        Rec::Exit(100, 101, 90),
        Rec::Exit(100, 100, 100),
        Rec::Fork(100, 1, 100, 1, 200),
        Rec::Comm(100, 100, 205, "b".into(), true),
        Rec::Mmap(100, 210, 0x40_0000, 0x1000, "/bin/b".into()),
    ]
}

fn check_pid_reuse(t: &ProcessTable, order: &str) {
    let a = || Some("/bin/a".to_string());
    let b = || Some("/bin/b".to_string());
    let init = || Some("/bin/init".to_string());
    // A's samples, even resolved after A exited and B started.
    assert_eq!(file_at(t, 100, 0x40_0100, 50), a(), "{order}");
    assert_eq!(file_at(t, 100, 0x40_0100, 99), a(), "{order}");
    assert_eq!(t.thread_name(100, 100, 50), Some("a"), "{order}");
    assert_eq!(t.thread_name(100, 101, 50), Some("a-worker"), "{order}");
    // Between fork and exec, A has its parent's mappings only.
    assert_eq!(file_at(t, 100, 0x1100, 15), init(), "{order}");
    assert_eq!(file_at(t, 100, 0x40_0100, 15), None, "{order}");
    assert_eq!(t.thread_name(100, 100, 15), Some("init"), "{order}");
    // Nothing on pid 100 between A's exit and B's fork.
    assert_eq!(file_at(t, 100, 0x40_0100, 150), None, "{order}");
    assert_eq!(file_at(t, 100, 0x1100, 150), None, "{order}");
    // B inherits from its parent, not from A.
    assert_eq!(file_at(t, 100, 0x1100, 202), init(), "{order}");
    assert_eq!(file_at(t, 100, 0x40_0100, 202), None, "{order}");
    assert_eq!(t.thread_name(100, 100, 202), Some("init"), "{order}");
    // B after its exec.
    assert_eq!(file_at(t, 100, 0x40_0100, 250), b(), "{order}");
    assert_eq!(file_at(t, 100, 0x1100, 250), None, "{order}");
    assert_eq!(t.thread_name(100, 100, 250), Some("b"), "{order}");
    assert_eq!(
        t.thread_name(100, 101, 250),
        Some("b"),
        "{order}: a dead thread's name falls back to the live main thread"
    );
    assert_eq!(
        t.process_key(100, 50),
        Some(ProcessKey {
            pid: 100,
            start_time: 10
        }),
        "{order}"
    );
    assert_eq!(
        t.process_key(100, 250),
        Some(ProcessKey {
            pid: 100,
            start_time: 200
        }),
        "{order}"
    );
    let at_250: Vec<String> = t
        .mappings_at(100, 250)
        .map(|m| t.files().get(m.file).path.clone())
        .collect();
    assert_eq!(at_250, ["/bin/b"], "{order}");
}

#[test]
fn a_reused_pid_names_each_process_by_its_own_records() {
    let mut t = with_parent();
    for r in pid_reuse_records() {
        apply(&mut t, &r);
    }
    check_pid_reuse(&t, "in order");
    assert_eq!(t.sizes().incarnations, 2 + 1);
    // Pruning at 150 forgets A (and its worker thread); B is untouched.
    let pruned = t.prune(150);
    assert_eq!(pruned.processes, 1);
    assert_eq!(pruned.removed.len(), 1, "A, by its own key");
    assert_eq!(pruned.removed[0].pid, 100);
    assert_ne!(
        Some(pruned.removed[0]),
        t.process_key(100, 250),
        "not B, on the same pid"
    );
    assert_eq!(pruned.threads, 1, "A's worker thread");
    assert_eq!(t.sizes().incarnations, 2);
    assert_eq!(file_at(&t, 100, 0x40_0100, 250).as_deref(), Some("/bin/b"));
    assert_eq!(t.thread_name(100, 100, 250), Some("b"));
    assert_eq!(pruned.released_files.len(), 1, "/bin/a only");
    // A sample of A resolved too late is not named from B.
    assert_eq!(file_at(&t, 100, 0x40_0100, 50), None);
    assert_eq!(t.process_key(100, 50), None);
    assert!(t.files().ids().all(|id| t.files().get(id).path != "/bin/a"));
}

#[test]
fn a_reused_pid_resolves_the_same_whatever_the_arrival_order() {
    let records = pid_reuse_records();
    let mut rng = Lcg(7);
    let mut orders: Vec<Vec<Rec>> = vec![records.iter().rev().cloned().collect()];
    // B's records before A's; exits before everything.
    let mut b_first = records[7..].to_vec();
    b_first.extend_from_slice(&records[..7]);
    orders.push(b_first);
    let mut exits_first: Vec<Rec> = records
        .iter()
        .filter(|r| matches!(r, Rec::Exit(..)))
        .cloned()
        .collect();
    exits_first.extend(
        records
            .iter()
            .filter(|r| !matches!(r, Rec::Exit(..)))
            .cloned(),
    );
    orders.push(exits_first);
    for _ in 0..3000 {
        let mut order = records.clone();
        rng.shuffle(&mut order);
        orders.push(order);
    }
    for order in orders {
        let mut t = with_parent();
        for r in &order {
            apply(&mut t, r);
        }
        check_pid_reuse(&t, &format!("{order:?}"));
        t.prune(150);
        assert_eq!(
            file_at(&t, 100, 0x40_0100, 250).as_deref(),
            Some("/bin/b"),
            "{order:?}"
        );
        assert_eq!(t.sizes().incarnations, 2, "{order:?}");
    }
}

#[test]
fn a_process_ends_with_its_last_thread() {
    let mut t = with_parent();
    t.fork(300, 1, 300, 1, 10);
    t.add_mapping(300, 11, 0x5000, 0x1000, 0, file("/bin/c"));
    t.fork(300, 300, 301, 300, 12);
    // The main thread exits first (pthread_exit); its thread goes on until 80. The
    // thread's EXIT arrives first.
    t.exit(300, 301, 80);
    t.exit(300, 300, 50);
    assert_eq!(file_at(&t, 300, 0x5100, 60).as_deref(), Some("/bin/c"));
    assert_eq!(file_at(&t, 300, 0x5100, 85), None);
    assert_eq!(t.prune(70).processes, 0);
    assert_eq!(t.prune(100).processes, 1);
    // Without the thread's EXIT, the process stays (its thread may run) until its pid
    // is reused.
    t.fork(400, 1, 400, 1, 10);
    t.add_mapping(400, 11, 0x5000, 0x1000, 0, file("/bin/d"));
    t.fork(400, 400, 401, 400, 12);
    t.exit(400, 400, 50);
    assert_eq!(t.prune(1000).processes, 0);
    t.fork(400, 1, 400, 1, 2000);
    let pruned = t.prune(3000);
    assert_eq!((pruned.processes, pruned.threads), (1, 1));
}

#[test]
fn exited_threads_of_a_live_process_are_pruned_and_a_reused_tid_is_not_misnamed() {
    let mut t = with_parent();
    t.fork(500, 1, 500, 1, 5);
    t.fork(500, 500, 501, 500, 10);
    t.set_comm(500, 501, 11, "short-lived", false);
    t.exit(500, 501, 20);
    assert_eq!(t.thread_name(500, 501, 15), Some("short-lived"));
    assert_eq!(
        t.thread_name(500, 501, 25),
        Some("init"),
        "the main thread's"
    );
    let pruned = t.prune(30);
    assert_eq!((pruned.threads, pruned.processes), (1, 0));
    assert_eq!(t.sizes().threads, 2);
    // The tid is reused by a thread of a process whose name is unknown: not the old name.
    t.set_comm(600, 600, 0, "other", false);
    t.fork(600, 600, 601, 600, 40);
    t.set_comm(600, 601, 41, "old-name", false);
    t.exit(600, 601, 50);
    t.fork(601, 9999, 601, 9999, 60);
    assert_eq!(t.thread_name(601, 601, 65), None);
    assert_eq!(t.thread_name(600, 601, 45), Some("old-name"));
}

#[test]
fn exit_ends_the_mappings_and_a_late_sample_still_resolves() {
    let mut t = with_parent();
    t.fork(7, 1, 7, 1, 10);
    t.add_mapping(7, 20, 0x40_0000, 0x1000, 0, file("/bin/e"));
    t.exit(7, 7, 100);
    assert_eq!(file_at(&t, 7, 0x40_0100, 99).as_deref(), Some("/bin/e"));
    assert_eq!(file_at(&t, 7, 0x40_0100, 100), None);
    assert_eq!(t.mappings_at(7, 150).count(), 0);
    assert_eq!(
        t.mappings_at(7, 50).count(),
        2,
        "inherited /bin/init and /bin/e"
    );
}

#[test]
fn an_older_mapping_arriving_late_keeps_what_later_ones_do_not_cover() {
    // /lib/x (at 10) covers 0x1000..0x5000; /lib/y (at 20) replaced 0x2000..0x3000 and
    // arrived first.
    let mut t = table_without_proc();
    t.add_mapping(1, 20, 0x2000, 0x1000, 0, file("/lib/y"));
    t.add_mapping(1, 10, 0x1000, 0x4000, 0, file("/lib/x"));
    let f = |addr, time| {
        t.find_mapping(1, addr, time)
            .map(|m| (t.files().get(m.file).path.clone(), m.file_offset(addr)))
    };
    assert_eq!(f(0x2800, 15), Some(("/lib/x".into(), 0x1800)));
    assert_eq!(f(0x2800, 25), Some(("/lib/y".into(), 0x800)));
    assert_eq!(f(0x1800, 25), Some(("/lib/x".into(), 0x800)));
    assert_eq!(f(0x4800, 25), Some(("/lib/x".into(), 0x3800)));
    // A piece of an old mapping split by a later one still ends at an exec that
    // arrives last.
    let mut t = table_without_proc();
    t.add_mapping(2, 0, 0x1000, 0x3000, 0, file("/bin/sh"));
    t.add_mapping(2, 200, 0x1000, 0x1000, 0, file("/bin/burner"));
    t.set_comm(2, 2, 150, "burner", true);
    assert_eq!(file_at(&t, 2, 0x2800, 100).as_deref(), Some("/bin/sh"));
    assert_eq!(file_at(&t, 2, 0x2800, 250), None);
    assert_eq!(file_at(&t, 2, 0x1800, 250).as_deref(), Some("/bin/burner"));
}

#[test]
fn files_are_released_when_no_mapping_refers_to_them() {
    let mut t = with_parent();
    for (pid, time) in [(10, 10), (11, 20)] {
        t.fork(pid, 1, pid, 1, time);
        t.add_mapping(pid, time + 1, 0x7000, 0x1000, 0, file("/lib/shared"));
    }
    let shared = t.find_mapping(10, 0x7000, 15).unwrap().file;
    t.exit(10, 10, 30);
    assert_eq!(t.prune(40).released_files, []);
    assert_eq!(t.files().get(shared).path, "/lib/shared");
    t.exit(11, 11, 50);
    assert_eq!(t.prune(60).released_files, [shared]);
    assert!(t.files().try_get(shared).is_none());
    // The parent's file stays; nothing is released twice.
    assert_eq!(t.prune(70).released_files, []);
    assert_eq!(t.sizes().files, 1);
    // Mapped again: a new id.
    t.fork(12, 1, 12, 1, 80);
    let again = t.add_mapping(12, 81, 0x7000, 0x1000, 0, file("/lib/shared"));
    assert!(again.file > shared);
    // A file whose only mapping was superseded goes too.
    let old = t
        .add_mapping(12, 82, 0x9000, 0x1000, 0, file("/lib/old"))
        .file;
    t.add_mapping(12, 90, 0x9000, 0x1000, 0, file("/lib/new"));
    assert_eq!(t.prune(85).released_files, []);
    assert_eq!(t.prune(95).released_files, [old]);
}

#[test]
fn superseded_names_are_pruned_and_the_intern_table_rebuilt() {
    let mut t = table_without_proc();
    for i in 0..1000u64 {
        t.set_comm(5, 5, i, &format!("name-{i}"), false);
    }
    assert_eq!(t.sizes().thread_names, 1000);
    let pruned = t.prune(990);
    assert_eq!(t.sizes().thread_names, 10);
    assert_eq!(pruned.names, 990);
    assert_eq!(t.sizes().names, 10);
    assert_eq!(t.thread_name(5, 5, 990), Some("name-990"));
    assert_eq!(t.thread_name(5, 5, 5000), Some("name-999"));
    // Interning still works after the rebuild.
    t.set_comm(5, 5, 2000, "name-995", false);
    assert_eq!(t.sizes().names, 10);
    assert_eq!(t.thread_name(5, 5, 2000), Some("name-995"));
}

#[test]
fn uid_is_read_inherited_and_unknown_after_exec_until_read() {
    use std::os::unix::fs::MetadataExt;
    let own = std::process::id();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let parsed = parse_status(&status).unwrap();
    let euid = std::fs::metadata("/proc/self").unwrap().uid();
    assert_eq!(parsed.one_uid, Some(euid));
    let mut t = ProcessTable::new();
    t.synthesize(own).unwrap();
    assert_eq!(t.uid(own, 5), Some(euid));
    // A made-up parent with another uid.
    let (parent, child) = (u32::MAX - 3, u32::MAX - 4);
    let theirs = Owner {
        uid: 4242,
        real_uid: 4242,
    };
    t.process_for_record(parent, 0).uids = vec![(0, theirs)];
    t.fork(child, parent, child, parent, 10);
    assert_eq!(t.uid(child, 15), Some(4242), "inherited");
    // Exec of a process /proc does not have: unknown (it may be set-uid), and stays so;
    // its real uid is still its user's (an exec never changes it), to charge it to.
    t.set_comm(child, child, 20, "x", true);
    assert_eq!(t.uid(child, 15), Some(4242), "before the exec");
    t.read_exec_uid(child, 25);
    assert_eq!(t.uid(child, 25), Some(UNKNOWN_UID));
    assert_eq!(
        t.owner(child, 25),
        Some(Owner {
            uid: UNKNOWN_UID,
            real_uid: 4242
        }),
        "gone before it was read: still charged to its user"
    );
    // Exec of a live process: read again, from the exec on. The process on the pid must
    // have started by the exec (records' times are CLOCK_MONOTONIC): an exec at a time before
    // this process started is another process's, on a pid since reused.
    let now = crate::sys::monotonic_ns();
    t.fork(own, parent, own, parent, 100);
    assert_eq!(t.uid(own, 105), Some(4242));
    t.set_comm(own, own, 110, parsed.name, true);
    t.read_exec_uid(own, 115);
    assert_eq!(
        t.owner(own, 115),
        Some(Owner {
            uid: UNKNOWN_UID,
            real_uid: 4242
        }),
        "the process on the pid started after the exec: not this one, nothing read"
    );
    // Renamed since the exec (/proc shows another name than the exec gave): still this
    // process, read.
    t.set_comm(own, own, now, "before-rename", true);
    t.set_comm(own, own, now + 1, parsed.name, false);
    assert_eq!(
        t.uid(own, now + 5),
        Some(UNKNOWN_UID),
        "unknown from the exec until read"
    );
    t.read_exec_uid(own, now - 1);
    assert_eq!(
        t.uid(own, now + 5),
        Some(UNKNOWN_UID),
        "a sample before the exec reads nothing"
    );
    // A fork before the parent was sampled reads the parent's, for the child.
    let grandchild = u32::MAX - 5;
    t.fork(grandchild, own, grandchild, own, now + 2);
    assert_eq!(t.uid(grandchild, now + 3), Some(euid), "read at the fork");
    assert_eq!(t.uid(own, now + 5), Some(euid), "whatever its name now");
    assert_eq!(
        t.owner(own, now + 5).map(|o| o.real_uid),
        Some(parsed.real_uid),
        "the real uid read with it"
    );
    assert_eq!(t.uid(own, 115), Some(UNKNOWN_UID));
    assert_eq!(t.uid(own, 5), Some(euid), "the synthesized process before");
    // Forgotten with its process.
    t.exit(child, child, 200);
    t.prune(now + 300);
    assert_eq!(t.uid(child, 25), None);
}

/// A set-uid program's process (its saved uid is root's while it runs as the user) and
/// one that is not dumpable belong to nobody: only admins see them.
#[test]
fn a_process_its_user_may_not_trace_has_no_owner() {
    assert_eq!(owner(std::process::id(), None), UNKNOWN_UID, "ids differ");
    if crate::sys::geteuid() != 0 {
        return;
    }
    // This process's /proc directory is root's: for uid 4242 it is not dumpable.
    assert_eq!(owner(std::process::id(), Some(4242)), UNKNOWN_UID);
    assert_eq!(owner(std::process::id(), Some(0)), 0);
}

/// 100,000 short-lived processes (fork, exec, mappings, a thread, renames, exit) on 700
/// reused pids, records shuffled within batches of 5 processes, pruned every 1,000
/// processes at the start of the 500th last: every size stays under a bound linear in the
/// processes not yet prunable (checked before and after each prune), samples resolve to
/// their own process, and the table returns to the baseline (the parent) at the end.
#[test]
fn churn_stays_bounded_and_returns_to_baseline() {
    const PROCESSES: u64 = 100_000;
    const PRUNE_EVERY: u64 = 1_000;
    const LAG: u64 = 500;
    const BATCH: u64 = 5;
    const SPAN: u64 = 100;
    let mut t = with_parent();
    t.add_mapping(1, 0, 0x7f00_0000, 0x10_0000, 0, file("/lib/libc.so.6"));
    t.add_mapping(1, 0, 0x7f10_0000, 0x1000, 0, file("[vdso]"));
    let baseline = t.sizes();
    // The bound with `live` processes in the table. Per process at most: 2 incarnations
    // (its own, and one started at 0 when a record of a pid not seen before arrives
    // before its FORK), 2 threads, 7 thread names (fork, exec and rename of the main
    // thread, fork and comm of the worker, +2), 3 inherited + 3 own mappings (+2 pieces),
    // 3 names in use, 2 own files. The name table is rebuilt when fewer than half are used.
    let bound = |live: u64| {
        let live = live as usize;
        TableSizes {
            processes: baseline.processes + live.min(700),
            incarnations: baseline.incarnations + 2 * live,
            threads: baseline.threads + 2 * live,
            thread_names: baseline.thread_names + 7 * live,
            mappings: baseline.mappings + 8 * live,
            names: 2 * (baseline.names + 3 * live) + MIN_NAMES_TO_REBUILD,
            files: baseline.files + 2 * live,
        }
    };
    let within = |s: TableSizes, b: TableSizes| {
        s.processes <= b.processes
            && s.incarnations <= b.incarnations
            && s.threads <= b.threads
            && s.thread_names <= b.thread_names
            && s.mappings <= b.mappings
            && s.names <= b.names
            && s.files <= b.files
    };
    let mut rng = Lcg(42);
    let mut peak = baseline;
    let mut batch = Vec::new();
    let mut released = HashSet::new();
    let mut last_file = 0;
    for i in 0..PROCESSES {
        let t0 = 1_000 + i * SPAN;
        let pid = 1_000 + (i % 700) as u32;
        let worker = 100_000 + (i % 700) as u32;
        batch.extend([
            Rec::Fork(pid, 1, pid, 1, t0),
            Rec::Comm(pid, pid, t0 + 10, format!("job-{i}"), true),
            Rec::Mmap(
                pid,
                t0 + 11,
                0x40_0000,
                0x2000,
                format!("/bin/job-{}", i % 5000),
            ),
            Rec::Mmap(
                pid,
                t0 + 12,
                0x7f00_0000,
                0x10_0000,
                "/lib/libc.so.6".into(),
            ),
            Rec::Mmap(pid, t0 + 13, 0x7e00_0000, 0x1000, format!("/tmp/jit-{i}")),
            Rec::Fork(pid, pid, worker, pid, t0 + 20),
            Rec::Comm(pid, worker, t0 + 21, format!("worker-{i}"), false),
            Rec::Exit(pid, worker, t0 + 30),
            Rec::Comm(pid, pid, t0 + 40, format!("renamed-{i}"), false),
            Rec::Exit(pid, pid, t0 + 50),
        ]);
        if (i + 1) % BATCH == 0 {
            rng.shuffle(&mut batch);
            for r in batch.drain(..) {
                apply(&mut t, &r);
            }
            // Samples of the batch resolve to their own process.
            for j in i + 1 - BATCH..=i {
                let (t0, pid) = (1_000 + j * SPAN, 1_000 + (j % 700) as u32);
                let job = format!("/bin/job-{}", j % 5000);
                assert_eq!(file_at(&t, pid, 0x40_1000, t0 + 45), Some(job));
                let name = t.thread_name(pid, pid, t0 + 45).map(str::to_string);
                assert_eq!(name, Some(format!("renamed-{j}")));
                assert_eq!(file_at(&t, pid, 0x40_1000, t0 + 55), None);
                let key = t.process_key(pid, t0 + 45).unwrap();
                assert_eq!(key.start_time, t0);
            }
        }
        if (i + 1) % PRUNE_EVERY == 0 {
            // Before: what the last prune left, and the processes since.
            let s = t.sizes();
            let b = bound(LAG + PRUNE_EVERY);
            assert!(within(s, b), "{s:?} exceeds {b:?} before pruning at {i}");
            let pruned = t.prune(1_000 + (i + 1 - LAG) * SPAN);
            for id in pruned.released_files {
                assert!(released.insert(id), "{id:?} released twice");
            }
            // After: the last LAG processes (and their batch).
            let s = t.sizes();
            let b = bound(LAG + BATCH);
            assert!(within(s, b), "{s:?} exceeds {b:?} after pruning at {i}");
            peak = TableSizes {
                processes: peak.processes.max(s.processes),
                incarnations: peak.incarnations.max(s.incarnations),
                threads: peak.threads.max(s.threads),
                thread_names: peak.thread_names.max(s.thread_names),
                mappings: peak.mappings.max(s.mappings),
                names: peak.names.max(s.names),
                files: peak.files.max(s.files),
            };
            // Ids only grow.
            let max = t.files().ids().map(|f| f.0).max().unwrap_or(0);
            assert!(max >= last_file);
            last_file = max;
        }
    }
    let pruned = t.prune(1_000 + (PROCESSES + 1) * SPAN);
    for id in pruned.released_files {
        assert!(released.insert(id), "{id:?} released twice");
    }
    let end = t.sizes();
    assert_eq!(
        TableSizes {
            names: baseline.names,
            ..end
        },
        baseline,
        "back to the parent alone (peak {peak:?})"
    );
    assert!(end.names <= MIN_NAMES_TO_REBUILD, "{end:?}");
    assert_eq!(
        file_at(&t, 1, 0x1100, u64::MAX - 1).as_deref(),
        Some("/bin/init")
    );
    assert_eq!(t.thread_name(1, 1, u64::MAX - 1), Some("init"));
    eprintln!("peak {peak:?}");
}

#[test]
fn synthesizes_this_process() {
    let mut t = ProcessTable::new();
    let pid = std::process::id();
    t.synthesize(pid).unwrap();
    let exe = std::env::current_exe().unwrap();
    let addr = synthesizes_this_process as fn() as usize as u64;
    let m = t
        .find_mapping(pid, addr, 5)
        .expect("test function is mapped");
    assert_eq!(t.files().get(m.file).path, exe.to_str().unwrap());
    assert!(t.thread_name(pid, pid, 5).is_some());
    assert!(matches!(
        t.synthesize(u32::MAX - 1),
        Err(ProcError::Vanished { .. })
    ));
}
