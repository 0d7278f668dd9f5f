//! Print the frames the Go function table gives for addresses: `gosym_frames FILE ADDR…`
//! (hexadecimal file addresses), one line per address, innermost first, `name@file:line`
//! separated by ` <- `; then the stack-pointer delta.

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: gosym_frames FILE ADDR...");
        std::process::exit(2);
    };
    let data = std::fs::read(&path).expect("read the file");
    let table = match gosym::GoTable::from_elf(&data[..]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("{table:?}");
    for a in args {
        let pc = u64::from_str_radix(a.trim_start_matches("0x"), 16).expect("hex address");
        let mut parts = Vec::new();
        table.frames(pc, |f| {
            parts.push(format!(
                "{}@{}:{}",
                gosym::print_name(f.function),
                f.file.unwrap_or("?"),
                f.line.unwrap_or(0)
            ))
        });
        let delta = table.func_at(pc).and_then(|f| f.sp_delta(pc));
        println!("{a} {} sp+{delta:?}", parts.join(" <- "));
    }
}
