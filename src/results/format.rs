//! Number formatting shared by every output: C's and Python's `%g` (perf_analyzer's stdout and
//! CSV, the seeds' tables) and Python's `.Ne`.

/// Python's `format(value, "g")`: six significant digits, trailing zeros dropped, exponent form
/// outside 1e-4 ≤ |value| < 1e6. 002 and 004 print every number this way.
pub fn format_g(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{value:.5e}");
    let (mantissa, exponent) = sci.split_once('e').expect("exponent form");
    let exponent: i32 = exponent.parse().expect("integer exponent");
    if (-4..6).contains(&exponent) {
        let fixed = format!("{value:.*}", (5 - exponent) as usize);
        strip_zeros(&fixed).to_owned()
    } else {
        format!("{}e{}", strip_zeros(mantissa), python_exponent(exponent))
    }
}

/// Python's `format(value, ".{digits}e")`, e.g. `3.64e+05` (Rust would print `3.64e5`).
pub fn format_e(value: f64, digits: usize) -> String {
    if !value.is_finite() {
        return format_g(value);
    }
    let sci = format!("{value:.digits$e}");
    let (mantissa, exponent) = sci.split_once('e').expect("exponent form");
    format!("{mantissa}e{}", python_exponent(exponent.parse().expect("integer exponent")))
}

fn python_exponent(exponent: i32) -> String {
    format!("{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs())
}

fn strip_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// Rounds to `decimals` the way printing does (decimal, not binary), then back to a number.
pub fn round_decimal(value: f64, decimals: usize) -> f64 {
    format!("{value:.decimals$}").parse().unwrap_or(value)
}

pub fn fixed(value: f64, decimals: usize) -> String {
    if value.is_nan() {
        "nan".into()
    } else {
        format!("{value:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_matches_python() {
        assert_eq!(format_g(164.0), "164");
        assert_eq!(format_g(12.22), "12.22");
        assert_eq!(format_g(0.038), "0.038");
        assert_eq!(format_g(0.0), "0");
        assert_eq!(format_g(1234567.0), "1.23457e+06");
        assert_eq!(format_g(0.00001234), "1.234e-05");
        assert_eq!(format_g(123456.0), "123456");
    }

    #[test]
    fn e_format_matches_python() {
        assert_eq!(format_e(364000.0, 2), "3.64e+05");
        assert_eq!(format_e(4.0e6, 2), "4.00e+06");
        assert_eq!(format_e(0.00123, 2), "1.23e-03");
    }
}
