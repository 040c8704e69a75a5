//! The pickle reader on hand-made pickles.

use super::*;

#[test]
fn reads_containers_memo_and_calls() {
    // pickle.dumps({"a": [1, 2.5, None], "b": ("x", True)}, protocol=2) by hand:
    let mut p = vec![0x80, 2, b'}', b'q', 0, b'(', 0x8c, 1, b'a', b']', b'q', 1];
    p.extend([b'(', b'K', 1, b'G']);
    p.extend(2.5f64.to_be_bytes());
    p.extend([b'N', b'e', 0x8c, 1, b'b', 0x8c, 1, b'x', 0x88, 0x86, b'u']);
    // and a second reference to the list, through the memo: d["c"] = d["a"]
    p.extend([0x8c, 1, b'c', b'h', 1, b's', b'.']);
    let (g, used) = load(&p).unwrap();
    assert_eq!(used, p.len());
    let Node::Dict(items) = &g.nodes[g.root] else {
        panic!("{:?}", g.nodes[g.root])
    };
    assert_eq!(items.len(), 3);
    assert_eq!(items[0].1, items[2].1, "memo GET gives the same node");
    let Node::List(l) = &g.nodes[items[0].1] else {
        panic!()
    };
    assert!(matches!(g.nodes[l[1]], Node::Float(f) if f == 2.5));
}

#[test]
fn integers_of_every_width() {
    assert_eq!(small_int(&[0xff]), Some(-1));
    assert_eq!(small_int(&[0x00, 0x01]), Some(256));
    assert_eq!(small_int(&[]), Some(0));
    assert_eq!(small_int(&[0; 9]), None);
}

#[test]
fn malformed_input_is_an_error() {
    for bad in [
        &b""[..],
        b"\x80\x02",
        b"\x80\x09.",
        b"X\xff\xff\xff\xff",
        b"h\x05.",
        b"e.",
        b"]\x8c\x01aNs.",
        b"\xff",
    ] {
        assert!(load(bad).is_err(), "{bad:?}");
    }
}
