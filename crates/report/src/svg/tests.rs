//! Number formatting, scales, ticks and charts, including hostile input.

use super::*;

#[test]
fn numbers_have_three_significant_digits() {
    assert_eq!(fmt_num(0.000123), "0.000123");
    assert_eq!(fmt_num(0.0001234), "0.000123");
    assert_eq!(fmt_num(12345.0), "12300");
    assert_eq!(fmt_num(1.5), "1.5");
    assert_eq!(fmt_num(99.96), "100");
    assert_eq!(fmt_num(999.6), "1000");
    assert_eq!(fmt_num(-2.345), "-2.35");
    assert_eq!(fmt_num(0.0), "0");
    assert_eq!(fmt_num(-0.0), "0");
    assert_eq!(fmt_num(42.0), "42");
    assert_eq!(fmt_num(123_456_789.0), "123000000");
    assert_eq!(fmt_num(1.234e12), "1.23e12");
    assert_eq!(fmt_num(1.5e-9), "1.5e-9");
    assert_eq!(fmt_num(f64::NAN), "NaN");
    assert_eq!(fmt_num(f64::INFINITY), "∞");
    assert_eq!(fmt_num(f64::NEG_INFINITY), "-∞");
}

#[test]
fn tick_labels_follow_the_step() {
    assert_eq!(fmt_tick(0.30000000000000004, 0.1), "0.3");
    assert_eq!(fmt_tick(100_100.0, 100.0), "100100");
    assert_eq!(fmt_tick(-0.0000001, 0.5), "0.0");
    assert_eq!(fmt_tick(2.0, 0.5), "2.0");
}

#[test]
fn nice_ticks_cover_the_data_at_round_numbers() {
    let t = nice_ticks(3.2, 97.0, 5);
    assert_eq!(t.values, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
    assert_eq!((t.lo, t.hi), (0.0, 100.0));
    assert_eq!(t.labels[1], "20");

    let t = nice_ticks(0.0, 1.0, 5);
    assert_eq!(t.labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);

    let t = nice_ticks(-7.0, 12.0, 5);
    assert!(t.lo <= -7.0 && t.hi >= 12.0 && t.values.contains(&0.0), "{t:?}");

    // A single value gets a domain around it; nonsense gets 0..=1.
    let t = nice_ticks(5.0, 5.0, 5);
    assert!(t.lo < 5.0 && t.hi > 5.0, "{t:?}");
    let t = nice_ticks(0.0, 0.0, 5);
    assert!(t.lo < 0.0 && t.hi > 0.0, "{t:?}");
    let t = nice_ticks(f64::NAN, f64::INFINITY, 5);
    assert_eq!((t.lo, t.hi), (0.0, 1.0));
    assert!(t.values.iter().all(|v| v.is_finite()));
}

#[test]
fn log_ticks_are_decades_or_1_2_5() {
    let t = log_ticks(37.0, 12_000.0).unwrap();
    assert_eq!((t.lo, t.hi), (10.0, 100_000.0));
    assert_eq!(t.values, vec![10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
    assert_eq!(t.labels, ["10", "100", "1000", "10000", "100000"]);

    let t = log_ticks(0.002, 0.03).unwrap();
    assert_eq!(t.labels, ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1"]);

    let t = log_ticks(5.0, 5.0).unwrap();
    assert_eq!((t.lo, t.hi), (1.0, 10.0));

    let t = log_ticks(1e-3, 1e15).unwrap();
    assert!(t.values.len() <= 11, "{:?}", t.values);
    assert_eq!(*t.values.last().unwrap(), 1e15);

    assert!(log_ticks(0.0, 10.0).is_none());
    assert!(log_ticks(-1.0, 10.0).is_none());
    assert!(log_ticks(1.0, f64::NAN).is_none());
}

#[test]
fn scales_map_and_reject() {
    let lin = Scale::new(&nice_ticks(0.0, 100.0, 5), 0.0, 200.0);
    assert_eq!(lin.map(50.0), Some(100.0));
    assert_eq!(lin.map(f64::NAN), None);
    assert_eq!(lin.map(f64::INFINITY), None);
    let log = Scale::new(&log_ticks(1.0, 1000.0).unwrap(), 300.0, 0.0);
    assert_eq!(log.map(10.0), Some(200.0));
    assert_eq!(log.map(0.0), None);
    assert_eq!(log.map(-5.0), None);
}

#[test]
fn paths_skip_non_finite_points() {
    let d = path_d([(1.0, 2.0), (f64::NAN, 3.0), (3.25, f64::INFINITY), (4.0, 5.55)]);
    assert_eq!(d.as_deref(), Some("M1 2L4 5.5"));
    assert_eq!(path_d([(f64::NAN, 1.0)]), None);
}

#[test]
fn escaping_covers_markup_and_quotes() {
    assert_eq!(
        escape(r#"<a href="x">'&'</a>"#),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
}

fn assert_clean(svg: &str) {
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
    for bad in ["NaN", "inf", "<script"] {
        assert!(!svg.contains(bad), "{bad} in {svg}");
    }
}

#[test]
fn line_charts_drop_undrawable_points() {
    let a = [[1.0, 0.1], [f64::NAN, 0.5], [10.0, f64::INFINITY], [100.0, 1.0]];
    let b = [[0.0, 0.5], [-3.0, 1.0]];
    let x = Axis { label: "latency (µs)".into(), log: true, fixed: None };
    let y = Axis { label: "fraction".into(), log: false, fixed: Some((0.0, 1.0)) };
    let lines =
        [Line { label: "<b>", index: 0, points: &a }, Line { label: "neg", index: 1, points: &b }];
    let svg = line_chart("t & t", &x, &y, &lines).unwrap();
    assert_clean(&svg);
    assert!(svg.contains("&lt;b&gt;") && svg.contains("t &amp; t"), "{svg}");
    // The variant with nothing drawable on a log axis has no line and no legend entry.
    assert!(!svg.contains(">neg<"), "{svg}");
    assert_eq!(line_chart("t", &x, &y, &lines[1..]), None);
    assert_eq!(line_chart("t", &x, &y, &[]), None);
}

#[test]
fn bar_charts_draw_medians_and_whiskers() {
    let groups = [
        BarGroup { label: "p99_us", bars: vec![(0, 10.0, 8.0, 12.0), (1, 20.0, 19.0, 30.0)] },
        BarGroup { label: "nothing", bars: vec![(0, f64::NAN, 1.0, 2.0)] },
    ];
    let legend = [(0, "a"), (1, "b")];
    let y = Axis { label: "µs".into(), ..Axis::default() };
    let svg = bar_chart("bars", &y, &groups, &legend).unwrap();
    assert_clean(&svg);
    assert_eq!(svg.matches("<rect").count(), 5, "background, 2 legend blocks, 2 bars: {svg}");
    assert_eq!(svg.matches(r#"<rect class="bar""#).count(), 2, "{svg}");
    assert!(!svg.contains(">nothing<"), "{svg}");
    let log = Axis { log: true, ..y };
    let svg = bar_chart("bars", &log, &groups, &legend).unwrap();
    assert_clean(&svg);
    assert_eq!(bar_chart("bars", &log, &groups[1..], &legend), None);
}
