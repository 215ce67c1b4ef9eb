use super::write::shortest_js_number;
use super::*;

impl Doc {
    /// Number of values in the document.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// The SIMD scan stops exactly where a byte-at-a-time scan does, for a
/// special byte at every offset of blocks longer than one vector, and
/// strings with long plain runs and escapes still parse to the same text.
/// The byte-at-a-time writer `write_json_str` replaced, as the oracle.
fn write_json_str_bytewise(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn write_json_str_escapes_exactly_what_json_stringify_does() {
    let specials = [
        '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}', 'é', '😀',
        '\u{2028}', 'a',
    ];
    for len in 0..70 {
        for &special in &specials {
            for at in 0..=len {
                let text: String = (0..len)
                    .map(|i| if i == at { special } else { 'x' })
                    .collect();
                let mut out = String::new();
                write_json_str(&text, &mut out);
                assert_eq!(out, write_json_str_bytewise(&text), "{text:?}");
                // And JSON.parse (ours) reads it back.
                let back = parse(&out).map(|d| d.str(d.root()).map(|s| s.as_str().to_string()));
                assert_eq!(back.ok().flatten(), Some(text));
            }
        }
    }
    // Every control byte, in runs of every mix.
    let all: String = (0u32..0x80)
        .filter_map(char::from_u32)
        .cycle()
        .take(1000)
        .collect();
    let mut out = String::from("kept");
    write_json_str(&all, &mut out);
    assert_eq!(out, format!("kept{}", write_json_str_bytewise(&all)));
}

#[test]
fn json_str_len_is_the_length_write_json_str_writes() {
    let long_mixed = "a\"b\\c\u{1}\u{e9}\u{1f600}\n".repeat(300);
    for s in [
        "",
        "plain",
        "\"",
        "\\",
        "\u{0}\u{8}\u{c}\u{1f}\u{7f}",
        "\u{2028}\u{20ac}",
        &long_mixed,
    ] {
        let mut out = String::new();
        write_json_str(s, &mut out);
        assert_eq!(json_str_len(s), out.len(), "{s:?}");
    }
}

#[test]
fn a_long_string_with_escapes_and_non_ascii_parses() {
    let long = format!("{}é\\n\\\"{}\\u00e9", "x".repeat(100), "y".repeat(37));
    let doc = super::parse(&format!("\"{long}\"")).map_err(|e| e.offset);
    let want = format!("{}é\n\"{}é", "x".repeat(100), "y".repeat(37));
    assert_eq!(
        doc.map(|d| d.str(d.root()).map(|s| s.as_str().to_string())),
        Ok(Some(want))
    );
}

#[test]
fn lone_surrogate_escapes_become_replacement_characters_for_serde() {
    let fixed = |t: &str| lone_surrogates_replaced(t).into_owned();
    assert_eq!(fixed(r#"{"a":"\ud800"}"#), r#"{"a":"\ufffd"}"#);
    assert_eq!(fixed(r#"["\udc00x","\uDBFF"]"#), r#"["\ufffdx","\ufffd"]"#);
    // A pair is kept; an escaped backslash before "ud800" is no escape.
    assert_eq!(fixed(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
    assert_eq!(fixed(r#""\\ud800""#), r#""\\ud800""#);
    // A high surrogate followed by another high one: both lone.
    assert_eq!(fixed(r#""\ud800\ud800""#), r#""\ufffd\ufffd""#);
    assert!(matches!(
        lone_surrogates_replaced(r#"{"a":1}"#),
        std::borrow::Cow::Borrowed(_)
    ));
    // Truncated escapes are left for the parser to refuse.
    assert_eq!(fixed(r#""\ud8"#), r#""\ud8"#);
    let v: serde_json::Value =
        serde_json::from_str(&fixed(r#"{"label":"a\ud800b"}"#)).unwrap_or_default();
    assert_eq!(v["label"], "a\u{fffd}b");
}

fn p(text: &str) -> Doc {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn accepts_what_json_parse_accepts() {
    for ok in [
        "0",
        "-0",
        "1e400",
        "5.0",
        " \t\n\r[] ",
        "\"\\ud800\"",
        "{\"a\":1,\"a\":2}",
        "[1,[2,[3]]]",
        "\"\\u00e9\\/\"",
        "-1.5E-3",
        "null",
    ] {
        assert!(parse(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        " ",
        "01",
        "1.",
        ".5",
        "+1",
        "[1,]",
        "{\"a\":1,}",
        "{a:1}",
        "'x'",
        "\"\t\"",
        "\u{feff}1",
        "NaN",
        "\"\\x\"",
        "\"\\u12\"",
        "[1 2]",
        "{\"a\" 1}",
        "tru",
        "1 2",
        "-",
        "1e",
        "[",
        "{\"a\":",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn numbers_are_doubles() {
    let d = p("[1e400,-0,5e0,123456789012345678901234567890]");
    let Node::Array(items) = d.node(d.root()) else {
        panic!()
    };
    let n = |i: usize| match d.node(items[i]) {
        Node::Number(n) => *n,
        _ => panic!(),
    };
    assert_eq!(n(0), f64::INFINITY);
    assert!(n(1) == 0.0 && n(1).is_sign_negative());
    assert_eq!(n(2), 5.0);
    assert_eq!(n(3), 1.2345678901234568e29);
}

#[test]
fn duplicate_keys_keep_first_position_last_value() {
    let d = p(r#"{"b":1,"a":2,"b":3}"#);
    assert_eq!(d.to_json(d.root()), r#"{"b":3,"a":2}"#);
}

#[test]
fn to_json_writes_non_finite_numbers_as_json_stringify_does() {
    // `1e400` parses to Infinity; JSON.stringify writes that as `null`.
    let d = p("[1e400,-1e400,-0,1.5]");
    assert_eq!(d.to_json(d.root()), "[null,null,0,1.5]");
}

#[test]
fn index_keys_come_first_in_numeric_order() {
    let d = p(r#"{"b":1,"10":2,"a":3,"2":4,"01":5,"4294967295":6,"4294967294":7}"#);
    assert_eq!(
        d.to_json(d.root()),
        r#"{"2":4,"10":2,"4294967294":7,"b":1,"a":3,"01":5,"4294967295":6}"#
    );
}

#[test]
fn lone_surrogates_keep_lengths_and_identity() {
    let d = p(r#"{"\ud800":1,"\ufffd":2,"x":"a\udc00b","y":"\ud83d\ude00"}"#);
    let Node::Object(entries) = d.node(d.root()) else {
        panic!()
    };
    assert_eq!(
        entries.len(),
        2 + 2,
        "lone surrogate and U+FFFD are distinct keys"
    );
    let x = d.str(d.get(d.root(), "x").unwrap()).unwrap();
    assert!(x.has_lone_surrogate());
    assert_eq!((x.utf16_len(), x.code_points()), (3, 3));
    let y = d.str(d.get(d.root(), "y").unwrap()).unwrap();
    assert!(!y.has_lone_surrogate());
    assert_eq!((y.utf16_len(), y.code_points()), (2, 1));
    assert_eq!(
        d.to_json(d.root()),
        r#"{"\ud800":1,"�":2,"x":"a\udc00b","y":"😀"}"#
    );
}

#[test]
fn nesting_to_the_limit_parses_and_one_level_more_is_refused_where_it_opens() {
    use super::MAX_DEPTH;
    let arrays = |n: usize| "[".repeat(n) + &"]".repeat(n);
    assert_eq!(p(&arrays(MAX_DEPTH)).len(), MAX_DEPTH);
    let objects = |n: usize| "{\"a\":".repeat(n - 1) + "{}" + &"}".repeat(n - 1);
    assert!(parse(&objects(MAX_DEPTH)).is_ok());
    for text in [arrays(MAX_DEPTH + 1), objects(MAX_DEPTH + 1)] {
        let e = parse(&text).expect_err("one level too deep");
        assert!(e.too_deep, "{e}");
        let opener = text
            .char_indices()
            .filter(|(_, c)| matches!(c, '[' | '{'))
            .nth(MAX_DEPTH)
            .map(|(at, _)| at);
        assert_eq!(Some(e.offset), opener, "refused at the 65th opener");
    }
    // Mixed, with white space and values before the deep part.
    let mixed = format!(
        r#"{{"x": [1, {{"y": {}}}], "z": 2}}"#,
        arrays(MAX_DEPTH - 3)
    );
    assert!(parse(&mixed).is_ok());
    let mixed = format!(
        r#"{{"x": [1, {{"y": {}}}], "z": 2}}"#,
        arrays(MAX_DEPTH - 2)
    );
    assert!(parse(&mixed).unwrap_err().too_deep);
    // Other errors are not "too deep".
    assert!(!parse("[1,]").unwrap_err().too_deep);
}

#[test]
fn a_body_of_six_mebibytes_of_brackets_is_refused_after_sixty_five_bytes() {
    let text = "[".repeat(6 << 20);
    let e = parse(&text).expect_err("too deep");
    assert_eq!((e.too_deep, e.offset), (true, super::MAX_DEPTH));
    let text = "{\"a\":".repeat(1 << 20);
    let e = parse(&text).expect_err("too deep");
    assert_eq!((e.too_deep, e.offset), (true, 5 * super::MAX_DEPTH));
    // Deep but never closed inside the limit: plain invalid JSON.
    assert!(!parse(&"[".repeat(10)).unwrap_err().too_deep);
}

#[test]
fn many_keys_stay_linear_and_deduplicate() {
    let mut text = String::from("{");
    for i in 0..50_000 {
        text.push_str(&format!("\"k{}\":{},", i % 40_000, i));
    }
    text.push_str("\"end\":0}");
    let d = p(&text);
    let Node::Object(entries) = d.node(d.root()) else {
        panic!()
    };
    assert_eq!(entries.len(), 40_001);
    assert_eq!(
        d.get(d.root(), "k0").map(|v| d.node(v).clone()),
        Some(Node::Number(40_000.0))
    );
}

#[test]
fn stringify_escapes_like_js() {
    let d = p(r#""\u0000\u001f\b\f\n\r\t\"\\/\u007f\u2028""#);
    assert_eq!(
        d.to_json(d.root()),
        "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\u{7f}\u{2028}\""
    );
}

#[test]
fn number_to_string_matches_js() {
    for (n, s) in [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (-1.5, "-1.5"),
        (123.456, "123.456"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ] {
        assert_eq!(js_number_to_string(n), s);
    }
}

#[test]
fn integers_take_the_short_way_with_the_same_text() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut cases: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        9.0,
        10.0,
        1_764_500_000_000.0,
        9_007_199_254_740_991.0,
        -9_007_199_254_740_991.0,
        // From 2^53 on, the shortest digits are no longer the integer's.
        9_007_199_254_740_992.0,
        1_152_921_504_606_846_976.0,
        0.5,
        -2.5,
    ];
    for _ in 0..20_000 {
        let bits = next();
        cases.push((bits >> 11) as f64 * if bits & 1 == 0 { 1.0 } else { -1.0 });
        cases.push((bits >> 40) as f64);
        cases.push(f64::from_bits(bits));
    }
    for n in cases {
        let mut fast = String::from("x");
        push_js_number(&mut fast, n);
        let want = if n == 0.0 {
            "0".to_string()
        } else {
            shortest_js_number(n)
        };
        assert_eq!(fast, format!("x{want}"), "{n:e}");
    }
    assert_eq!(
        js_number_to_string(1_152_921_504_606_846_976.0),
        "1152921504606847000"
    );
    assert_eq!(js_number_to_string(-0.0), "0");
}

#[test]
fn to_number_follows_js() {
    for (text, want) in [
        ("5", 5.0),
        ("\" 0x10 \"", 16.0),
        ("\"1e3\"", 1000.0),
        ("\"\"", 0.0),
        ("null", 0.0),
        ("true", 1.0),
        ("[]", 0.0),
        ("[[\"7\"]]", 7.0),
        ("[null]", 0.0),
        ("\"-Infinity\"", f64::NEG_INFINITY),
    ] {
        let d = p(text);
        assert_eq!(js_to_number(&d, d.root()), want, "{text}");
    }
    for text in [
        "{}",
        "[1,2]",
        "\"abc\"",
        "[true]",
        "\"infinity\"",
        "\"-0x1\"",
        "\"1e\"",
    ] {
        let d = p(text);
        assert!(js_to_number(&d, d.root()).is_nan(), "{text}");
    }
}
