//! Go function names as Go prints them.

use std::borrow::Cow;

/// A Go function name as the Go runtime prints it in tracebacks: the type arguments of a
/// generic function, which the tables spell with the compiler's shapes
/// (`main.Map[go.shape.int]`), shown as `[...]` (`main.Map[...]`). Other names are returned
/// unchanged (`main.(*T).Method` stays as it is).
pub fn print_name(name: &str) -> Cow<'_, str> {
    let (Some(open), Some(close)) = (name.find('['), name.rfind(']')) else {
        return Cow::Borrowed(name);
    };
    if close < open || &name[open..=close] == "[...]" {
        return Cow::Borrowed(name);
    }
    Cow::Owned(format!("{}[...]{}", &name[..open], &name[close + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generics_as_go_prints_them() {
        assert_eq!(print_name("main.Map[go.shape.int]"), "main.Map[...]");
        assert_eq!(
            print_name("main.(*List[go.shape.string]).Push"),
            "main.(*List[...]).Push"
        );
        assert_eq!(print_name("main.Map[...]"), "main.Map[...]");
        assert_eq!(print_name("main.(*T).Method"), "main.(*T).Method");
        assert_eq!(print_name("odd]name["), "odd]name[");
    }
}
