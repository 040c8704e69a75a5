//! The Python exception that ended a program, read from the end of its standard error, so that
//! a failed run says what was raised (`exited with status 1: AssertionError: … already tracked
//! for mutation`) before the last lines of standard error (which, for a long exception message
//! or one followed by more text, need not hold its name).

/// What Python prints before the frames of a traceback.
const HEADER: &str = "Traceback (most recent call last):";

/// Lines of an exception's message joined after its first (up to the first blank line).
const MORE_LINES: usize = 4;

/// The exception the last Python traceback in `stderr` ends with, as `Type: message` on one
/// line (the message's first paragraph, its lines joined by spaces). With chained exceptions
/// (`The above exception was the direct cause …`, `During handling …`) that is the one raised
/// last, whose traceback comes last. Lines prefixed by torch's per-rank tag (`[rank1]: `) or
/// another `[tag]:` are read as the traceback's own when its header has the same prefix. A
/// syntax error in the main script (no header, only its `File` line) is found too. `None` when
/// there is no traceback, or what follows the last one is not an exception line (an exception
/// group's or an interleaved print, which this does not try to untangle).
pub fn exception(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(|l| l.trim_end()).collect();
    let (at, prefix) = lines
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, l)| {
            let p = l.strip_suffix(HEADER)?;
            is_prefix(p).then_some((i, p))
        })
        .or_else(|| syntax_error_frame(&lines))?;
    let own: Vec<&str> = lines[at + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix(prefix))
        .collect();
    // The frames (`  File "…", line N, in f`, the source line, `^^^^` markers) are indented.
    let start = own
        .iter()
        .position(|l| !l.is_empty() && !l.starts_with([' ', '\t']))?;
    let first = own[start];
    let name = first.split_once(':').map_or(first, |(n, _)| n);
    // An exception group's traceback (`  + Exception Group Traceback …`) after this one: the
    // group is what was raised.
    let group = |l: &&str| l.trim_start().starts_with("+ Exception Group Traceback");
    if !is_exception_name(name) || own[start..].iter().any(group) {
        return None;
    }
    // The message's next lines, up to a blank line or a quoted traceback (a DataLoader
    // worker's `Original Traceback (most recent call last):`).
    let more = own[start + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty() && !l.ends_with(HEADER))
        .take(MORE_LINES)
        .map(|l| l.trim());
    Some(
        std::iter::once(first)
            .chain(more)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// A syntax error in the main script has no traceback header: its last `  File "…", line N`
/// line stands in for it.
fn syntax_error_frame<'a>(lines: &[&'a str]) -> Option<(usize, &'a str)> {
    let at = lines.iter().rposition(|l| l.starts_with("  File \""))?;
    let next = lines[at + 1..]
        .iter()
        .find(|l| !l.is_empty() && !l.starts_with([' ', '\t']))?;
    let name = next.split_once(':').map_or(*next, |(n, _)| n);
    matches!(name, "SyntaxError" | "IndentationError" | "TabError").then_some((at, ""))
}

/// Whether `p`, what precedes a traceback header on its line, is a prefix that tags every line
/// of one process: none, or `[rank1]: ` (torch.distributed), `[default0]:` (torchrun's
/// `--tee`).
fn is_prefix(p: &str) -> bool {
    let tag = p.trim_end();
    p.is_empty()
        || (tag.len() <= 40
            && tag.starts_with('[')
            && tag.ends_with("]:")
            && !tag.contains(char::is_whitespace))
}

/// Whether `s` is how Python names an exception type: dotted identifiers
/// (`ValueError`, `torch._dynamo.exc.TorchRuntimeError`).
fn is_exception_name(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && chars.all(|c| c.is_alphanumeric() || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIMPLE: &str = "some output
Traceback (most recent call last):
  File \"/tmp/t.py\", line 3, in <module>
    main()
    ~~~~^^
  File \"/tmp/t.py\", line 2, in main
    raise ValueError(\"bad value: 3\")
ValueError: bad value: 3
";

    #[test]
    fn the_exception_of_a_traceback_is_named() {
        assert_eq!(
            exception(SIMPLE).as_deref(),
            Some("ValueError: bad value: 3")
        );
        // No message; a qualified name.
        let bare = SIMPLE.replace("ValueError: bad value: 3", "KeyboardInterrupt");
        assert_eq!(exception(&bare).as_deref(), Some("KeyboardInterrupt"));
        let dotted = SIMPLE.replace("ValueError", "torch._dynamo.exc.Unsupported");
        assert_eq!(
            exception(&dotted).as_deref(),
            Some("torch._dynamo.exc.Unsupported: bad value: 3")
        );
    }

    #[test]
    fn the_last_of_chained_exceptions_is_the_one_raised() {
        let chained = format!(
            "{SIMPLE}\nThe above exception was the direct cause of the following exception:\n\n\
             Traceback (most recent call last):\n  File \"/tmp/t.py\", line 9, in <module>\n    \
             raise RuntimeError(\"wrapped\") from e\nRuntimeError: wrapped\n"
        );
        assert_eq!(
            exception(&chained).as_deref(),
            Some("RuntimeError: wrapped")
        );
        let during = chained.replace(
            "The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:",
        );
        assert_eq!(exception(&during).as_deref(), Some("RuntimeError: wrapped"));
    }

    #[test]
    fn a_multi_line_message_is_joined_up_to_its_first_blank_line() {
        // TorchDynamo's errors: a first line, indented details, then more paragraphs.
        let dynamo = "Traceback (most recent call last):
  File \"/tmp/t.py\", line 6, in <module>
    y = cm(x)
torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call
  Explanation: Dynamo failed to run FX node with fake tensors
  Hint: check eager

  Developer debug context:

from user code:
   File \"/tmp/t.py\", line 3, in forward
    return x.view(-1)

Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace
";
        assert_eq!(
            exception(dynamo).as_deref(),
            Some(
                "torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor \
                 call Explanation: Dynamo failed to run FX node with fake tensors Hint: check \
                 eager"
            )
        );
        let state_dict = SIMPLE.replace(
            "ValueError: bad value: 3",
            "RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in \
             state_dict: \"fc.weight\".",
        );
        assert_eq!(
            exception(&state_dict).as_deref(),
            Some(
                "RuntimeError: Error(s) in loading state_dict for Net: Missing key(s) in \
                 state_dict: \"fc.weight\"."
            )
        );
    }

    #[test]
    fn a_quoted_traceback_in_a_message_is_not_the_programs() {
        // A DataLoader worker's exception, re-raised in the main process with the worker's
        // traceback in its message.
        let worker = "Traceback (most recent call last):
  File \"/tmp/train.py\", line 12, in <module>
    for x in loader:
ValueError: Caught ValueError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File \"/venv/torch/utils/data/_utils/worker.py\", line 349, in _worker_loop
    data = fetcher.fetch(index)
ValueError: bad sample 7
";
        assert_eq!(
            exception(worker).as_deref(),
            Some("ValueError: Caught ValueError in DataLoader worker process 0.")
        );
    }

    #[test]
    fn a_ranks_tagged_lines_are_its_own() {
        // Two ranks' lines interleaved, each tagged: rank 1's traceback is read from its own.
        let tagged = "[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File \"/tmp/f.py\", line 4, in <module>
[rank0]:   File \"/tmp/f.py\", line 7, in <module>
[rank1]:     raise RuntimeError(\"rank one broke\")
[rank0]:     dist.barrier()
[rank1]: RuntimeError: rank one broke
[rank0]: torch.distributed.DistBackendError: peer closed
";
        let rank1: String = tagged
            .lines()
            .filter(|l| l.starts_with("[rank1]"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            exception(&rank1).as_deref(),
            Some("RuntimeError: rank one broke")
        );
        // The last header is rank 0's, read through rank 0's lines only.
        assert_eq!(
            exception(tagged).as_deref(),
            Some("torch.distributed.DistBackendError: peer closed")
        );
        let tee = "[default0]:Traceback (most recent call last):\n[default0]:  File \"f.py\", \
                   line 1, in <module>\n[default0]:ZeroDivisionError: division by zero\n";
        assert_eq!(
            exception(tee).as_deref(),
            Some("ZeroDivisionError: division by zero")
        );
    }

    #[test]
    fn a_syntax_error_in_the_main_script_is_found() {
        let syntax = "  File \"/tmp/s.py\", line 1
    def f(
         ^
SyntaxError: '(' was never closed
";
        assert_eq!(
            exception(syntax).as_deref(),
            Some("SyntaxError: '(' was never closed")
        );
    }

    #[test]
    fn no_traceback_or_an_unreadable_one_names_nothing() {
        for text in [
            "",
            "Segmentation fault (core dumped)\n",
            "  File \"x.py\", line 3\nsomething else\n",
            // A header followed by text that is no exception line.
            "Traceback (most recent call last):\n  File \"x\", line 1\nSegmentation fault here\n",
            // Cut off in the frames.
            "Traceback (most recent call last):\n  File \"x\", line 1, in <module>\n",
            // An exception group: its own header is not a plain traceback's.
            "  + Exception Group Traceback (most recent call last):\n  | ExceptionGroup: two\n",
        ] {
            assert_eq!(exception(text), None, "{text:?}");
        }
        // A plain traceback followed by an exception group's (chained): the group is the one
        // raised, and it is not read; the earlier exception is not named in its place.
        let then_group = format!(
            "{SIMPLE}\nDuring handling of the above exception, another exception \
             occurred:\n\n  + Exception Group Traceback (most recent call last):\n  | \
             ExceptionGroup: two (2 sub-exceptions)\n"
        );
        assert_eq!(exception(&then_group), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "(\\PC|\n|Traceback \\(most recent call last\\):\n|  File \"x\", line 1\n|\\[rank1\\]: |SyntaxError: x\n|ValueError: y\n| )*") {
            let _ = exception(&text);
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = exception(&String::from_utf8_lossy(&bytes));
        }
    }
}
