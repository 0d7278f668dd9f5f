//! Reading the state of processes alive before recording started from /proc.

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Whether the mapping is executable.
    pub executable: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Device as (major, minor).
    pub dev: (u32, u32),
    /// Inode (0 for anonymous mappings).
    pub inode: u64,
    /// Path or pseudo-name (may be empty); ` (deleted)` is kept.
    pub path: &'a str,
}

/// Parse `start-end perms offset maj:min inode path`.
pub fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        rest = rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        let (f, r) = rest.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let dev = field();
    let inode = field();
    let path = rest.trim();
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    Some(MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        inode: inode.parse().ok()?,
        path,
    })
}

/// What is read from /proc/PID/status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Status<'a> {
    /// `Name:` (the comm, escaped by the kernel).
    pub name: &'a str,
    /// The uid every one of its real, effective and saved uids is, when they are one and its
    /// real, effective and saved gids are one too; None for a set-uid or set-gid process (or
    /// one that changed an id since), which the kernel does not let its user trace.
    pub one_uid: Option<u32>,
    /// The real uid (the `Uid:` line's first id): the user who ran it, whatever a set-uid
    /// bit or its dumpability make of its other ids.
    pub real_uid: u32,
    /// The parent's pid (`PPid:`), when given.
    pub ppid: Option<u32>,
}

/// A `Uid:` or `Gid:` line's real id, and the one value of its real, effective and saved ids
/// (the filesystem id, last, follows the effective one) when they are equal.
fn real_and_one_id(ids: &str) -> Option<(u32, Option<u32>)> {
    let ids: Vec<u32> = ids
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let (&first, rest) = ids.get(..3)?.split_first()?;
    Some((first, rest.iter().all(|&i| i == first).then_some(first)))
}

/// Parse the `Name:`, `PPid:`, `Uid:` and `Gid:` lines of /proc/PID/status.
pub(crate) fn parse_status(status: &str) -> Option<Status<'_>> {
    let mut name = None;
    let mut uid = None;
    let mut gid = None;
    let mut ppid = None;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Name:") {
            name = Some(rest.strip_prefix('\t').unwrap_or(rest));
        } else if let Some(rest) = line.strip_prefix("PPid:") {
            ppid = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("Uid:") {
            uid = real_and_one_id(rest);
        } else if let Some(rest) = line.strip_prefix("Gid:") {
            gid = real_and_one_id(rest).and_then(|(_, one)| one);
            break;
        }
    }
    let (real_uid, one_uid) = uid?;
    Some(Status {
        name: name?,
        one_uid: one_uid.filter(|_| gid.is_some()),
        real_uid,
        ppid,
    })
}

/// Linux's `makedev` for the (major, minor) pair, to compare with `stat`'s st_dev.
pub(crate) fn makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (major as u64, minor as u64);
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_anonymous_lines() {
        let l = parse_maps_line("7f1c2a000000-7f1c2a1b5000 r-xp 00028000 fe:01 1311768    /usr/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        assert_eq!(l.start, 0x7f1c2a000000);
        assert_eq!(l.end, 0x7f1c2a1b5000);
        assert!(l.executable);
        assert_eq!(l.offset, 0x28000);
        assert_eq!(l.dev, (0xfe, 1));
        assert_eq!(l.inode, 1311768);
        assert_eq!(l.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let a = parse_maps_line(
            "7ffd5b7e2000-7ffd5b7e4000 r-xp 00000000 00:00 0                          [vdso]",
        )
        .unwrap();
        assert_eq!(a.path, "[vdso]");
        let b = parse_maps_line("7ffd5b7e2000-7ffd5b7e4000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(b.path, "");
        assert!(!b.executable);
        let d = parse_maps_line("5600-5700 r-xp 0 08:02 12 /tmp/a b (deleted)").unwrap();
        assert_eq!(d.path, "/tmp/a b (deleted)");
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn parses_status() {
        let s = "Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nPPid:\t77\nUid:\t1000\t0\t0\t0\nGid:\t1\t1\t1\t1\n";
        assert_eq!(
            parse_status(s),
            Some(Status {
                name: "my prog",
                one_uid: None,
                real_uid: 1000,
                ppid: Some(77),
            })
        );
        let plain = "Name:\tp\nUid:\t1000\t1000\t1000\t1000\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_status(plain).unwrap().one_uid, Some(1000));
        let setgid = "Name:\tp\nUid:\t1000\t1000\t1000\t1000\nGid:\t5\t42\t42\t42\n";
        assert_eq!(parse_status(setgid).unwrap().one_uid, None, "set-gid");
        let saved = "Name:\tp\nUid:\t1000\t1000\t0\t1000\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_status(saved).unwrap().one_uid, None, "saved uid root");
        // A set-uid root program its user ran: charged to that user.
        assert_eq!(parse_status(saved).unwrap().real_uid, 1000);
        let setuid = "Name:\tp\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_status(setuid).unwrap().real_uid, 1000, "set-uid");
        assert_eq!(parse_status(setuid).unwrap().one_uid, None, "set-uid");
        assert_eq!(parse_status("Name:\tx\n"), None);
    }

    #[test]
    fn makedev_matches_glibc() {
        assert_eq!(makedev(8, 1), 0x801);
        assert_eq!(makedev(0xfe, 1), 0xfe01);
    }
}
