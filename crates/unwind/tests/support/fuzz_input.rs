//! Input generation shared by the stable test `tests/fuzz_unwind.rs` and the cargo-fuzz target
//! `fuzz/fuzz_targets/unwind_sections.rs` (which includes this file by path).
//!
//! An input is a set of unwind sections (.text, .eh_frame, .eh_frame_hdr), user registers and a
//! stack copy. It is written as a small ELF file (one PT_LOAD at address 0, so section addresses
//! are file offsets), mapped into a fake process in a [`ProcessTable`], and unwound with the real
//! [`Unwinders::unwind`]: the same path as a recording (section loading on the loader thread,
//! load bias, framehop module, the unwind loop and its classification of how the stack ended).
//!
//! Bytes are decoded into an input in one of two ways (first byte, low bit):
//! - raw: the bytes are split into sections, registers and stack as they are;
//! - mutated template: a well-formed template (a chain of functions with frame-pointer CFI, a
//!   consistent .eh_frame_hdr and a stack that unwinds completely through them) with the bytes
//!   applied as edits (xor a byte of a section, the stack or the registers; cut a section).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use procmap::{MappedFile, ProcessTable};
use sampler::UserRegs;
use unwind::{StackEnd, Unwinders};

/// Where the fake process maps the file.
pub const MAP_START: u64 = 0x40_0000;
/// A pid no real process has (above the kernel's largest pid_max), so that
/// `/proc/PID/root/...` never exists and the file is opened directly.
pub const FAKE_PID: u32 = 0x7fff_fff0;
/// How long the harness waits for the loader thread to read an input's sections.
const LOAD_LIMIT: Duration = Duration::from_secs(10);
/// Functions in the template.
pub const TEMPLATE_FUNCS: usize = 24;
/// Bytes of code per template function.
const FUNC_SIZE: u64 = 16;
/// Offset, in a template function, of the instruction after its `call`.
const AFTER_CALL: u64 = 9;
/// Stack address of the template's sampled sp.
const TEMPLATE_SP: u64 = 0x7ffd_0000_0000;

/// One unwinding problem.
#[derive(Clone, Debug)]
pub struct Input {
    pub text: Vec<u8>,
    pub eh_frame: Vec<u8>,
    pub eh_frame_hdr: Vec<u8>,
    pub regs: UserRegs,
    pub stack: Vec<u8>,
}

/// Section file offsets (= addresses) in the generated ELF: fixed, so the template's
/// pc-relative encodings stay right whatever the section sizes.
const TEXT_AT: u64 = 0x1000;
const EH_FRAME_AT: u64 = 0x2000;
const EH_FRAME_HDR_AT: u64 = 0x6000;
/// Largest section accepted (bigger ones are cut).
const MAX_SECTION: usize = 0x4000;
/// Largest stack accepted.
pub const MAX_STACK: usize = 0x10000;

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn pad8(v: &mut Vec<u8>, from: usize) {
    while (v.len() - from) % 8 != 4 {
        v.push(0); // DW_CFA_nop, so that the length field says a multiple of 8
    }
}

/// The well-formed template: TEMPLATE_FUNCS functions `push rbp; mov rbp,rsp; call; pop; ret`,
/// with CFI saying so, and a stack of `depth` frames (f0 calls f1 … calls f(depth-1), which
/// was sampled right after its prologue). f0's CFI leaves its return address undefined (as
/// `_start`'s does): the stack is whole.
pub fn template(depth: usize) -> Input {
    assert!((1..=TEMPLATE_FUNCS).contains(&depth));
    // .text
    let mut text = Vec::new();
    for _ in 0..TEMPLATE_FUNCS {
        let f = [
            0x55, 0x48, 0x89, 0xe5, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90,
        ];
        text.extend_from_slice(&f);
    }
    // .eh_frame: one CIE, one FDE per function, a terminator.
    let mut eh = Vec::new();
    let cie_at = eh.len();
    eh.extend_from_slice(&[0; 4]); // length, patched
    eh.extend_from_slice(&0u32.to_le_bytes()); // CIE id
    eh.push(1); // version
    eh.extend_from_slice(b"zR\0");
    uleb(&mut eh, 1); // code alignment
    eh.push(0x78); // data alignment -8
    uleb(&mut eh, 16); // return address register (rip)
    uleb(&mut eh, 1); // augmentation data length
    eh.push(0x1b); // FDE pointers: pcrel | sdata4
    eh.extend_from_slice(&[0x0c, 0x07, 0x08]); // def_cfa rsp+8
    eh.extend_from_slice(&[0x90, 0x01]); // offset r16 at cfa-8
    pad8(&mut eh, cie_at);
    let len = (eh.len() - cie_at - 4) as u32;
    eh[cie_at..cie_at + 4].copy_from_slice(&len.to_le_bytes());
    let mut fdes = Vec::new();
    for i in 0..TEMPLATE_FUNCS {
        let at = eh.len();
        fdes.push(at);
        eh.extend_from_slice(&[0; 4]);
        let cie_ptr = (at + 4 - cie_at) as u32;
        eh.extend_from_slice(&cie_ptr.to_le_bytes());
        let func = TEXT_AT + i as u64 * FUNC_SIZE;
        let field = EH_FRAME_AT + eh.len() as u64;
        eh.extend_from_slice(&((func as i64 - field as i64) as i32).to_le_bytes());
        eh.extend_from_slice(&(FUNC_SIZE as u32).to_le_bytes());
        uleb(&mut eh, 0); // augmentation data length
        if i == 0 {
            // The outermost function, like `_start`: its return address is undefined.
            eh.extend_from_slice(&[0x07, 0x10]); // undefined r16
        }
        eh.push(0x41); // advance_loc 1 (after push rbp)
        eh.extend_from_slice(&[0x0e, 0x10]); // def_cfa_offset 16
        eh.extend_from_slice(&[0x86, 0x02]); // offset rbp at cfa-16
        eh.push(0x43); // advance_loc 3 (after mov rbp,rsp)
        eh.extend_from_slice(&[0x0d, 0x06]); // def_cfa_register rbp
        pad8(&mut eh, at);
        let len = (eh.len() - at - 4) as u32;
        eh[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    eh.extend_from_slice(&0u32.to_le_bytes());
    // .eh_frame_hdr
    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
    let field = EH_FRAME_HDR_AT + 4;
    hdr.extend_from_slice(&((EH_FRAME_AT as i64 - field as i64) as i32).to_le_bytes());
    hdr.extend_from_slice(&(TEMPLATE_FUNCS as u32).to_le_bytes());
    for (i, fde) in fdes.iter().enumerate() {
        let func = TEXT_AT + i as u64 * FUNC_SIZE;
        hdr.extend_from_slice(&((func as i64 - EH_FRAME_HDR_AT as i64) as i32).to_le_bytes());
        let fde_addr = EH_FRAME_AT + *fde as u64;
        hdr.extend_from_slice(&((fde_addr as i64 - EH_FRAME_HDR_AT as i64) as i32).to_le_bytes());
    }
    // The stack: frame k (k = depth-1 innermost) is 16 bytes at sp + 16*(depth-1-k):
    // [saved rbp of the caller, return address into the caller].
    let mut stack = Vec::new();
    for k in (0..depth).rev() {
        let this_rbp = TEMPLATE_SP + 16 * (depth - 1 - k) as u64;
        let (saved_rbp, ret) = if k == 0 {
            (0, 0)
        } else {
            (this_rbp + 16, avma(k - 1, AFTER_CALL))
        };
        stack.extend_from_slice(&saved_rbp.to_le_bytes());
        stack.extend_from_slice(&ret.to_le_bytes());
    }
    Input {
        text,
        eh_frame: eh,
        eh_frame_hdr: hdr,
        regs: UserRegs {
            ip: avma(depth - 1, 4),
            sp: TEMPLATE_SP,
            fp: TEMPLATE_SP,
            lr: 0,
        },
        stack,
    }
}

/// Process address of byte `offset` of template function `func`.
pub fn avma(func: usize, offset: u64) -> u64 {
    MAP_START + TEXT_AT + func as u64 * FUNC_SIZE + offset
}

/// What unwinding the template of `depth` frames must give: the sampled instruction, then
/// each caller's call site (return address − 1).
pub fn template_frames(depth: usize) -> Vec<u64> {
    let mut v = vec![avma(depth - 1, 4)];
    v.extend((0..depth - 1).rev().map(|k| avma(k, AFTER_CALL) - 1));
    v
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a.to_vec()
    }
}

impl Input {
    /// Decode arbitrary bytes into an input (never fails).
    pub fn from_bytes(data: &[u8]) -> Input {
        let mut b = Bytes(data);
        let mode = b.u8();
        if mode & 1 == 0 {
            // raw
            let text_len = b.u16() as usize % MAX_SECTION;
            let eh_len = b.u16() as usize % MAX_SECTION;
            let hdr_len = b.u16() as usize % MAX_SECTION;
            let regs = UserRegs {
                ip: b.u64(),
                sp: b.u64(),
                fp: b.u64(),
                lr: 0,
            };
            let text = b.take(text_len);
            let eh_frame = b.take(eh_len);
            let eh_frame_hdr = b.take(hdr_len);
            let stack = b.take(MAX_STACK);
            let mut input = Input {
                text,
                eh_frame,
                eh_frame_hdr,
                regs,
                stack,
            };
            if mode & 2 != 0 {
                // keep the ip inside the mapped code, where the sections are consulted
                input.regs.ip = MAP_START + TEXT_AT + input.regs.ip % 0x1000;
            }
            return input;
        }
        let depth = 1 + (mode >> 1) as usize % TEMPLATE_FUNCS;
        let mut input = template(depth);
        while !b.0.is_empty() {
            let op = b.u8();
            let at = b.u16() as usize;
            let x = b.u8();
            let target: &mut Vec<u8> = match op % 6 {
                0 => &mut input.text,
                1 | 2 => &mut input.eh_frame,
                3 => &mut input.eh_frame_hdr,
                4 => &mut input.stack,
                _ => {
                    let r = match (op / 6) % 3 {
                        0 => &mut input.regs.ip,
                        1 => &mut input.regs.sp,
                        _ => &mut input.regs.fp,
                    };
                    *r ^= (x as u64) << (8 * (at % 8));
                    continue;
                }
            };
            if target.is_empty() {
                continue;
            }
            if op >= 0xf0 {
                // cut the section (or stack) short
                let n = at % target.len();
                target.truncate(n);
            } else {
                let n = at % target.len();
                target[n] ^= x.max(1);
            }
        }
        input
    }

    /// The input as a small ELF file.
    pub fn elf(&self) -> Vec<u8> {
        let text = &self.text[..self.text.len().min(MAX_SECTION)];
        let eh = &self.eh_frame[..self.eh_frame.len().min(MAX_SECTION)];
        let hdr = &self.eh_frame_hdr[..self.eh_frame_hdr.len().min(MAX_SECTION)];
        let shstrtab: &[u8] = b"\0.text\0.eh_frame\0.eh_frame_hdr\0.shstrtab\0";
        let strtab_at = EH_FRAME_HDR_AT as usize + MAX_SECTION;
        let shoff = (strtab_at + shstrtab.len() + 7) & !7;
        let mut f = vec![0u8; shoff + 5 * 64];
        f[TEXT_AT as usize..][..text.len()].copy_from_slice(text);
        f[EH_FRAME_AT as usize..][..eh.len()].copy_from_slice(eh);
        f[EH_FRAME_HDR_AT as usize..][..hdr.len()].copy_from_slice(hdr);
        f[strtab_at..][..shstrtab.len()].copy_from_slice(shstrtab);
        let total = f.len() as u64;
        let put = |f: &mut Vec<u8>, at: usize, bytes: &[u8]| {
            f[at..at + bytes.len()].copy_from_slice(bytes)
        };
        // ELF header
        put(&mut f, 0, b"\x7fELF\x02\x01\x01\0");
        put(&mut f, 16, &3u16.to_le_bytes()); // ET_DYN
        put(&mut f, 18, &62u16.to_le_bytes()); // EM_X86_64
        put(&mut f, 20, &1u32.to_le_bytes());
        put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
        put(&mut f, 40, &(shoff as u64).to_le_bytes()); // e_shoff
        put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
        put(&mut f, 54, &56u16.to_le_bytes()); // e_phentsize
        put(&mut f, 56, &1u16.to_le_bytes()); // e_phnum
        put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
        put(&mut f, 60, &5u16.to_le_bytes()); // e_shnum
        put(&mut f, 62, &4u16.to_le_bytes()); // e_shstrndx
                                              // PT_LOAD R+X covering the whole file at address 0
        let ph = 64;
        put(&mut f, ph, &1u32.to_le_bytes());
        put(&mut f, ph + 4, &5u32.to_le_bytes());
        put(&mut f, ph + 32, &total.to_le_bytes()); // p_filesz
        put(&mut f, ph + 40, &total.to_le_bytes()); // p_memsz
        put(&mut f, ph + 48, &0x1000u64.to_le_bytes());
        // sections: name offset, type, flags, addr = offset, size
        let secs: [(u32, u32, u64, u64, usize); 4] = [
            (1, 1, 6, TEXT_AT, text.len()),
            (7, 1, 2, EH_FRAME_AT, eh.len()),
            (17, 1, 2, EH_FRAME_HDR_AT, hdr.len()),
            (31, 3, 0, strtab_at as u64, shstrtab.len()),
        ];
        for (i, (name, ty, flags, at, size)) in secs.into_iter().enumerate() {
            let sh = shoff + 64 * (i + 1);
            put(&mut f, sh, &name.to_le_bytes());
            put(&mut f, sh + 4, &ty.to_le_bytes());
            put(&mut f, sh + 8, &flags.to_le_bytes());
            put(
                &mut f,
                sh + 16,
                &(if ty == 3 { 0 } else { at }).to_le_bytes(),
            );
            put(&mut f, sh + 24, &at.to_le_bytes());
            put(&mut f, sh + 32, &(size as u64).to_le_bytes());
            put(&mut f, sh + 48, &1u64.to_le_bytes());
        }
        f
    }
}

/// Writes inputs as ELF files into one directory and unwinds them.
pub struct Harness {
    dir: PathBuf,
    n: u64,
    out: Vec<u64>,
}

impl Harness {
    pub fn new(dir: &Path) -> Harness {
        Harness {
            dir: dir.to_path_buf(),
            n: 0,
            out: Vec::new(),
        }
    }

    /// Unwind `input` with a fresh process table and unwinder set, as a recording would.
    pub fn unwind(&mut self, input: &Input) -> (Vec<u64>, StackEnd) {
        self.n += 1;
        let path = self.dir.join("fuzz.elf");
        let tmp = self.dir.join(format!("fuzz.elf.{}", self.n));
        {
            let mut f = std::fs::File::create(&tmp).expect("create input file");
            f.write_all(&input.elf()).expect("write input file");
        }
        // A rename, not a rewrite: a previous mapping of the old file stays valid.
        std::fs::rename(&tmp, &path).expect("rename input file");
        let path_str = path.to_str().expect("utf-8 temp path").to_string();
        let len = std::fs::metadata(&path).expect("stat").len();
        let mut table = ProcessTable::new();
        let mapping = table.add_mapping(
            FAKE_PID,
            0,
            MAP_START,
            (len + 0xfff) & !0xfff,
            0,
            MappedFile {
                path: path_str,
                build_id: None,
                dev_ino: None,
            },
        );
        // As in a recording: the mapping record asks for the file's sections (read on the
        // loader thread); here they are waited for, so the first sample finds them.
        let mut unwinders = Unwinders::new();
        unwinders.on_mapping(&table, FAKE_PID, &mapping);
        assert!(
            unwinders.wait_loaded(LOAD_LIMIT),
            "the input's sections were not read within {LOAD_LIMIT:?}"
        );
        assert_eq!(
            unwinders.sizes().load_panics,
            0,
            "reading the input's sections panicked (on the loader thread)"
        );
        let stack = &input.stack[..input.stack.len().min(MAX_STACK)];
        let end = unwinders.unwind(&table, FAKE_PID, 1, &input.regs, stack, &mut self.out);
        (self.out.clone(), end)
    }
}
