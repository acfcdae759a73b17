//! The gate's verdicts as JUnit XML, the format CI systems (GitHub Actions reporters, GitLab,
//! Jenkins) display: one testcase per matched row, failed when it regressed, and one skipped
//! testcase per row that only one side has.

use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;

use super::markdown::change_text;
use super::verdict::{GateOutcome, MetricCheck, RowCheck};

const SUITE: &str = "perfbench gate";
const CLASS: &str = "perfbench.gate";

/// The JUnit XML document for an outcome.
pub fn render(outcome: &GateOutcome) -> String {
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into a Vec cannot fail; the only errors quick-xml returns are the sink's.
    write_document(&mut writer, outcome).expect("writing XML into memory");
    let mut xml = String::from_utf8(writer.into_inner()).expect("quick-xml writes UTF-8");
    xml.push('\n');
    xml
}

fn write_document(writer: &mut Writer<Vec<u8>>, outcome: &GateOutcome) -> std::io::Result<()> {
    let skipped = outcome.only_in_baseline.len() + outcome.only_in_current.len();
    let tests = (outcome.rows.len() + skipped).to_string();
    let failures = outcome.regressed_rows().count().to_string();
    let skipped = skipped.to_string();
    let counts =
        [("tests", tests.as_str()), ("failures", failures.as_str()), ("errors", "0"), ("skipped", skipped.as_str())];
    writer.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    writer.create_element("testsuites").with_attribute(("name", SUITE)).with_attributes(counts).write_inner_content(
        |w| {
            w.create_element("testsuite")
                .with_attribute(("name", SUITE))
                .with_attributes(counts)
                .write_inner_content(|w| write_cases(w, outcome))?;
            Ok(())
        },
    )?;
    Ok(())
}

fn write_cases(w: &mut Writer<Vec<u8>>, outcome: &GateOutcome) -> std::io::Result<()> {
    for row in &outcome.rows {
        let name = row.label();
        let case =
            w.create_element("testcase").with_attribute(("classname", CLASS)).with_attribute(("name", name.as_str()));
        if row.regressed() {
            let message = failure_message(row);
            case.write_inner_content(|w| {
                w.create_element("failure")
                    .with_attribute(("type", "regression"))
                    .with_attribute(("message", message.as_str()))
                    .write_text_content(BytesText::new(&details(row)))?;
                Ok(())
            })?;
        } else {
            case.write_inner_content(|w| {
                w.create_element("system-out").write_text_content(BytesText::new(&details(row)))?;
                Ok(())
            })?;
        }
    }
    let unmatched = outcome
        .only_in_baseline
        .iter()
        .map(|k| (k, "only in baseline"))
        .chain(outcome.only_in_current.iter().map(|k| (k, "only in current")));
    for (key, why) in unmatched {
        let name = key.to_string();
        w.create_element("testcase")
            .with_attribute(("classname", CLASS))
            .with_attribute(("name", name.as_str()))
            .write_inner_content(|w| {
                w.create_element("skipped").with_attribute(("message", why)).write_empty()?;
                Ok(())
            })?;
    }
    Ok(())
}

/// One line per regressed metric, e.g. `p99 latency (µs) +40.0% (rise ≤ 15%, noise ±3.0%)`.
fn failure_message(row: &RowCheck) -> String {
    row.regressions().map(metric_line).collect::<Vec<_>>().join("; ")
}

fn metric_line(check: &MetricCheck) -> String {
    format!(
        "{} {} ({} ≤ {}%, noise ±{:.1}%)",
        check.metric.label(),
        change_text(check),
        check.metric.worse_word(),
        check.limit_pct,
        check.noise_pct
    )
}

/// Every metric of the row with baseline → current and its verdict.
fn details(row: &RowCheck) -> String {
    row.metrics
        .iter()
        .map(|c| format!("{}: {:.1} -> {:.1}, {}", metric_line(c), c.baseline, c.current, c.verdict.label()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use quick_xml::events::Event;
    use quick_xml::Reader;

    use super::*;
    use crate::gate::verdict::{compare, tests::row};
    use crate::gate::GateThresholds;

    #[test]
    fn one_testcase_per_row_failure_on_regression_skipped_for_unmatched() {
        let base = [row(1, 1000.0, 900.0, 800.0), row(2, 1000.0, 900.0, 800.0)];
        let cur = [row(1, 1000.0, 2000.0, 800.0), row(2, 1000.0, 900.0, 800.0), row(8, 1.0, 1.0, 1.0)];
        let outcome = compare(&base, &cur, &GateThresholds::default()).unwrap();
        let xml = render(&outcome);
        let mut reader = Reader::from_str(&xml);
        let (mut cases, mut failures, mut skipped) = (0, 0, 0);
        loop {
            match reader.read_event().expect("well-formed XML") {
                Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                    b"testcase" => cases += 1,
                    b"failure" => failures += 1,
                    b"skipped" => skipped += 1,
                    _ => {}
                },
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!((cases, failures, skipped), (3, 1, 1), "{xml}");
        assert!(xml.contains("p99 latency (µs) +122.2% (rise ≤ 15%, noise ±0.0%)"), "{xml}");
    }
}
