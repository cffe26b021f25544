//! The `events` table's payload column from a type's columns: every field but the
//! header, as the canonical JSON `projectors.payload` writes for a decoded event,
//! byte for byte: keys sorted (a record's fields and a map's keys alike), no spaces,
//! every character outside printable ASCII escaped as `\uXXXX` (a surrogate pair
//! past the BMP), bytes as lowercase hex, and a float as Python's `repr` writes it
//! (the shortest digits that read back to the same double; plain notation for
//! exponents from -4 to 15, else `d.ddde+XX`; `NaN`, `Infinity`, `-Infinity`).
//!
//! Nothing here knows an event type: the columns' own Arrow types say how each
//! value is written. tests/events/test_columnar.py holds it to the Python payload
//! on every schema file and on drawn floats and strings.

use std::fmt::Write;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array,
    Int64Array, ListArray, MapArray, RecordBatch, StringArray, StringBuilder, StructArray,
};
use arrow::datatypes::DataType;

/// One payload per row of `batch`, its `header` column left out.
pub fn payloads(batch: &RecordBatch) -> Result<StringArray, String> {
    let schema = batch.schema();
    let mut fields: Vec<(&str, &ArrayRef)> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| f.name() != "header")
        .map(|(f, c)| (f.name().as_str(), c))
        .collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = StringBuilder::with_capacity(batch.num_rows(), batch.num_rows() * 64);
    let mut text = String::new();
    for row in 0..batch.num_rows() {
        text.clear();
        text.push('{');
        for (n, (name, col)) in fields.iter().enumerate() {
            if n > 0 {
                text.push(',');
            }
            string(&mut text, name);
            text.push(':');
            value(&mut text, col.as_ref(), row)?;
        }
        text.push('}');
        out.append_value(&text);
    }
    Ok(out.finish())
}

/// Writes the value at `i` of `array`.
fn value(out: &mut String, array: &dyn Array, i: usize) -> Result<(), String> {
    if array.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    let any = array.as_any();
    match array.data_type() {
        DataType::Boolean => {
            let v = any.downcast_ref::<BooleanArray>().ok_or("a boolean column")?.value(i);
            out.push_str(if v { "true" } else { "false" });
        }
        DataType::Int32 => {
            let v = any.downcast_ref::<Int32Array>().ok_or("an int column")?.value(i);
            let _ = write!(out, "{v}");
        }
        DataType::Int64 => {
            let v = any.downcast_ref::<Int64Array>().ok_or("a long column")?.value(i);
            let _ = write!(out, "{v}");
        }
        // Avro's float is read into a Python float: the double of the same value.
        DataType::Float32 => {
            let v = any.downcast_ref::<Float32Array>().ok_or("a float column")?.value(i);
            float(out, f64::from(v));
        }
        DataType::Float64 => {
            float(out, any.downcast_ref::<Float64Array>().ok_or("a double column")?.value(i));
        }
        DataType::Binary => {
            out.push('"');
            for b in any.downcast_ref::<BinaryArray>().ok_or("a bytes column")?.value(i) {
                let _ = write!(out, "{b:02x}");
            }
            out.push('"');
        }
        DataType::Utf8 => {
            string(out, any.downcast_ref::<StringArray>().ok_or("a string column")?.value(i));
        }
        DataType::List(_) => {
            let items = any.downcast_ref::<ListArray>().ok_or("a list column")?.value(i);
            out.push('[');
            for j in 0..items.len() {
                if j > 0 {
                    out.push(',');
                }
                value(out, items.as_ref(), j)?;
            }
            out.push(']');
        }
        DataType::Map(_, _) => {
            let map = any.downcast_ref::<MapArray>().ok_or("a map column")?;
            let entries = map.value(i);
            let keys = entries.column(0).as_string::<i32>();
            let values = entries.column(1);
            let mut order: Vec<usize> = (0..entries.len()).collect();
            order.sort_by(|&a, &b| keys.value(a).cmp(keys.value(b)));
            out.push('{');
            for (n, j) in order.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                string(out, keys.value(j));
                out.push(':');
                value(out, values.as_ref(), j)?;
            }
            out.push('}');
        }
        DataType::Struct(fields) => {
            let record = any.downcast_ref::<StructArray>().ok_or("a record column")?;
            let mut order: Vec<usize> = (0..fields.len()).collect();
            order.sort_by(|&a, &b| fields[a].name().cmp(fields[b].name()));
            out.push('{');
            for (n, j) in order.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                string(out, fields[j].name());
                out.push(':');
                value(out, record.column(j).as_ref(), i)?;
            }
            out.push('}');
        }
        other => return Err(format!("no payload is written for a {other} column")),
    }
    Ok(())
}

/// A JSON string as Python's `json` writes it with `ensure_ascii`.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// A double as Python's `float.__repr__` writes it (and `json`, for the three
/// values JSON has no number for).
fn float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if x.is_sign_negative() {
        out.push('-');
    }
    // Rust's `{:e}` is the shortest digit string that reads back to the same double,
    // the closest of them to it: the digits Python's repr picks.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = exp as usize + 1;
        if point < digits.len() {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
            out.push_str(".0");
        }
    }
}
