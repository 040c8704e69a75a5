"""The short text of a failed check or marked test (:mod:`bitexact._pytest.check`), read from
the case's entry of ``bitexact run``'s JSON report: the verdict, the first divergence with its
counts and ULPs, a failed run's message and the blame; and the report's ``command:`` line
made to name the test instead of the worker that ran it."""


def show_command(text, shown):
    """``text`` (a report of one program case) with its ``command:`` line saying ``shown``
    instead of the command that ran (``None``: unchanged). The line is the report's own (its
    first line that starts ``    command: ``, see ``report::program_lines``)."""
    if shown is None:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("    command: "):
            lines[i] = "    command: " + shown
            break
    return "\n".join(lines)


def headline(what, case, runs):
    """The first line of a failed check: what, and the verdict over how many runs."""
    verdict = case["verdict"]
    said = {"nondeterministic": "is not deterministic over %d runs" % runs,
            "error": "failed in a fresh process"}.get(verdict, "is %s" % verdict)
    return "bitexact: %s %s" % (what, said)


def _sci(x):
    """``x`` as Rust's ``{:.3e}`` writes it (``8.838e-1``), as the report does. JSON has no
    infinity: the report writes ``null`` for one (a NaN against a number counts as infinite)."""
    if x is None or x in (float("inf"), float("-inf")):
        return "-inf" if x == float("-inf") else "inf"
    if x != x:
        return "NaN"
    mantissa, exp = ("%.3e" % x).split("e")
    return "%se%d" % (mantissa, int(exp))


def _output(name, strip):
    """An output's name as the summary shows it: ``strip`` (``<fn>.safetensors:``) removed, so
    a check's outputs read as its leaves (``w``, ``layers.0.weight``)."""
    return name[len(strip):] if strip and name.startswith(strip) else name


def diff_line(d, strip=""):
    """One differing output of the JSON report (a ``TensorDiff``) in words, as
    ``TensorDiff::summary`` writes it: ``w: 3/16 elements differ (runs 0 and 1), first at
    [0, 2] (0.5 vs 0.50000006), max |Δ| 5.960e-8, max 1 ULP``."""
    name = _output(d["tensor"], strip)
    if d.get("note"):
        return "%s: %s" % (name, d["note"])
    ulp = ", max %d ULP" % d["max_ulp"] if d.get("max_ulp") is not None else ""
    return "%s: %d/%d elements differ (runs %d and %d), first at %s (%s vs %s), max |Δ| %s%s" % (
        name, d["elements_differing"], d["elements"], d["runs"][0], d["runs"][1],
        "[%s]" % ", ".join(str(i) for i in d["first_index"]), d["first_values"][0],
        d["first_values"][1], _sci(d["max_abs"]), ulp)


# More differing outputs the summary names after the first (the report names them all).
MORE = 3


def summary(what, case, runs, strip=""):
    """The short explanation of a failed check or marked test, from the case's entry of the
    JSON report: the verdict line, then (indented) the first divergence with its counts and
    ULPs, up to :data:`MORE` other differing outputs, a failed run's message and the blame."""
    lines = []
    diffs = list(case.get("diff") or [])
    div = case.get("divergence")
    # The divergence of a program is its first differing output; under trace=True it is the
    # first diverging op, said in its own words, and the first differing output follows.
    first = next((d for d in diffs if div and d["tensor"] == div.get("op")), None)
    if div and first is None:
        said = div.get("explanation") or div.get("op", "")
        lines.append(said if said.startswith("first divergence") else
                     "first divergence: %s" % said)
        if diffs:
            first = diffs[0]
            lines.append("first differing output: %s" % diff_line(first, strip))
    elif diffs:
        first = first or diffs[0]
        lines.append("first divergence: %s" % diff_line(first, strip))
    rest = [d for d in diffs if d is not first]
    lines.extend(diff_line(d, strip) for d in rest[:MORE])
    if len(rest) > MORE:
        names = [_output(d["tensor"], strip) for d in rest[MORE:]]
        lines.append("%d more differ: %s" % (len(names), ", ".join(names[:8]) + (
            ", …" if len(names) > 8 else "")))
    if case.get("message"):
        lines.append(case["message"])
    blame = case.get("blame")
    if blame and blame.get("explanation"):
        lines.append("blame: %s" % blame["explanation"])
    body = "\n".join(lines).replace("\n", "\n    ")
    return headline(what, case, runs) + ("\n    " + body if lines else "")
