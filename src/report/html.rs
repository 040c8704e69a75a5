//! HTML report (`--format html`): one self-contained page, no network. The page is a small
//! shell (`html/page.html`) with its style (`html/report.css`) and script (`html/report.js`)
//! inline and the JSON report ([`super::json`]'s data, compact) embedded in
//! `<script type="application/json" id="bitexact-report">`; the script draws everything from
//! that JSON: the verdict table, for each divergence how it grows step by step, the op
//! timeline around the first diverging op, the ULP histogram and positions of the first
//! differing tensor, blame as a table of variations against verdicts, and the platform. So
//! the page holds exactly the data of `--format json`, and a reader can take it back out.
//!
//! The JSON is embedded with `<`, `>`, `&`, U+2028 and U+2029 written as `\uXXXX` escapes
//! ([`embed`]): none of these can occur outside a JSON string, so the text stays the same
//! JSON, and no value (a case name, a program's output) can close the script element or open
//! a comment in it.

use crate::outcome::Report;

/// The page around the report: `{{style}}`, `{{script}}` and `{{report}}` are filled in.
const PAGE: &str = include_str!("html/page.html");
/// The page's style sheet, inlined.
const STYLE: &str = include_str!("html/report.css");
/// The script that draws the report from its embedded JSON, inlined.
const SCRIPT: &str = include_str!("html/report.js");

/// The report as one self-contained HTML page.
pub fn render(report: &Report) -> String {
    page(&serde_json::to_value(report).expect("report serialises"))
}

/// The page for a report already in JSON form (what [`render`] embeds; a report with fields
/// this build does not know, e.g. `divergence.growth`, is drawn with them).
pub fn page(report: &serde_json::Value) -> String {
    let json = report.to_string();
    fill(
        PAGE,
        &[
            ("{{style}}", STYLE),
            ("{{script}}", SCRIPT),
            ("{{report}}", &embed(&json)),
        ],
    )
}

/// `template` with each placeholder replaced by its text, in one pass over the template: text
/// filled in is never searched for placeholders again.
fn fill(template: &str, parts: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + parts.iter().map(|p| p.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some((at, (key, text))) = parts
        .iter()
        .filter_map(|p| rest.find(p.0).map(|at| (at, *p)))
        .min_by_key(|(at, _)| *at)
    {
        out.push_str(&rest[..at]);
        out.push_str(text);
        rest = &rest[at + key.len()..];
    }
    out.push_str(rest);
    out
}

/// JSON text made safe inside an HTML `<script>` element: `<`, `>`, `&`, U+2028 and U+2029 as
/// `\uXXXX` escapes. Valid only for JSON text (where those characters can only be inside
/// strings, so the escapes keep the value).
pub fn embed(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for ch in json.chars() {
        match ch {
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", ch as u32))
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assets_cannot_close_their_elements_and_fetch_nothing() {
        for (name, text) in [("report.js", SCRIPT), ("report.css", STYLE)] {
            // The SVG namespace is a name, not an address the page fetches.
            let lower = text
                .replace("http://www.w3.org/2000/svg", "")
                .to_ascii_lowercase();
            let network = [
                "http:",
                "https:",
                "fetch(",
                "xmlhttprequest",
                "import",
                "url(",
            ];
            for bad in ["</script", "</style", "<!--"].iter().chain(&network) {
                assert!(!lower.contains(bad), "{name} contains {bad}");
            }
        }
        for key in ["{{style}}", "{{script}}", "{{report}}"] {
            assert_eq!(PAGE.matches(key).count(), 1, "{key}");
        }
        // Small: the whole page without a report stays under 24 KiB.
        assert!(PAGE.len() + STYLE.len() + SCRIPT.len() < 24 << 10);
    }

    #[test]
    fn filled_text_is_not_searched_again() {
        let page = fill("a{{x}}b{{y}}c", &[("{{x}}", "{{y}}"), ("{{y}}", "Y")]);
        assert_eq!(page, "a{{y}}bYc");
    }

    #[test]
    fn a_hostile_case_name_stays_inside_the_json() {
        let name = "</script><script>alert(1)</script><!-- & \u{2028}";
        let json = serde_json::to_string(&serde_json::json!({ "name": name })).unwrap();
        let page = fill(PAGE, &[("{{report}}", &embed(&json))]);
        assert!(!page.contains("alert(1)</script>"));
        let start = page.find("id=\"bitexact-report\">").unwrap() + "id=\"bitexact-report\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        let back: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(back["name"], name);
    }

    proptest::proptest! {
        /// Any JSON text embeds without `<`, `>` or `&`, and parses to what the JSON text
        /// parses to.
        #[test]
        fn embedding_keeps_the_value(s in ".*", n in proptest::num::f64::NORMAL, k in "[<>&a-z\u{2028}]{0,8}") {
            let v = serde_json::json!({ k.clone(): [s, n], "nested": { "k": k } });
            let plain = serde_json::to_string(&v).unwrap();
            let text = embed(&plain);
            let unsafe_chars = ['<', '>', '&', '\u{2028}', '\u{2029}'];
            proptest::prop_assert!(!text.contains(unsafe_chars), "{}", text);
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            let want: serde_json::Value = serde_json::from_str(&plain).unwrap();
            proptest::prop_assert_eq!(back, want);
        }
    }
}
