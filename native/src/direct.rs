//! A body written with its type's newest schema, read straight into the columns.
//!
//! Most records on a log are written by today's writers, with the newest schema,
//! so nothing needs resolving: for those, the body's bytes go to the column
//! builders without an `apache_avro::types::Value` in between (which allocates a
//! string per field name per record). A record is first walked without keeping
//! anything ([`Shape::check`]), so one that is cut short, overlong or not UTF-8
//! is refused whole and leaves no partial row; then it is appended
//! ([`Shape::append`]), which cannot fail on bytes that passed the check.
//! Older writers go through apache-avro's resolution instead (`lib.rs`).

use apache_avro::schema::Schema;
use arrow::array::ArrayBuilder;

use crate::columns::Col;

/// The layout of a schema node, as the bytes have it.
pub enum Shape {
    Null,
    Bool,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    Str,
    Array(Box<Shape>),
    Map(Box<Shape>),
    Record(Vec<Shape>),
    /// `["null", X]` or `[X, "null"]`: which branch index is the null.
    Nullable { null_index: i64, inner: Box<Shape> },
}

pub fn shape(schema: &Schema) -> Result<Shape, String> {
    Ok(match schema {
        Schema::Null => Shape::Null,
        Schema::Boolean => Shape::Bool,
        Schema::Int => Shape::Int,
        Schema::Long => Shape::Long,
        Schema::Float => Shape::Float,
        Schema::Double => Shape::Double,
        Schema::Bytes => Shape::Bytes,
        Schema::String => Shape::Str,
        Schema::Array(array) => Shape::Array(Box::new(shape(&array.items)?)),
        Schema::Map(map) => Shape::Map(Box::new(shape(&map.types)?)),
        Schema::Record(record) => {
            Shape::Record(record.fields.iter().map(|f| shape(&f.schema)).collect::<Result<_, _>>()?)
        }
        Schema::Union(union) => {
            let variants = union.variants();
            let null_index = variants.iter().position(|s| *s == Schema::Null);
            match (variants.len(), null_index) {
                (2, Some(i)) => Shape::Nullable {
                    null_index: i as i64,
                    inner: Box::new(shape(&variants[1 - i])?),
                },
                _ => return Err(format!("only [\"null\", X] unions are read, not {schema:?}")),
            }
        }
        other => return Err(format!("the Avro type {other:?} has no column here")),
    })
}

/// A cursor over a body; every read names what ran short.
pub struct Cursor<'a> {
    pub rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.rest.len() {
            return Err(format!("the body ends inside a {what} ({n} bytes wanted, {} left)",
                               self.rest.len()));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some((&byte, tail)) = self.rest.split_first() else {
                return Err("the body ends inside a number".to_string());
            };
            self.rest = tail;
            if i == 9 && byte > 1 {
                return Err("a number longer than 64 bits".to_string());
            }
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err("a number longer than 64 bits".to_string())
    }

    fn int(&mut self) -> Result<i32, String> {
        let value = self.long()?;
        i32::try_from(value).map_err(|_| format!("an int of {value} does not fit 32 bits"))
    }

    fn len(&mut self, what: &str) -> Result<usize, String> {
        let n = self.long()?;
        usize::try_from(n).map_err(|_| format!("a {what} of negative length {n}"))
    }

    /// The item count of the next block of an array or map (0: the end), past the
    /// byte size a negative count carries.
    fn block(&mut self) -> Result<usize, String> {
        let n = self.long()?;
        if n >= 0 {
            return Ok(n as usize);
        }
        self.long()?; // the block's size in bytes, which this reader does not need
        n.checked_neg().map(|n| n as usize).ok_or_else(|| "a block count out of range".into())
    }

    fn text(&mut self) -> Result<&'a str, String> {
        let n = self.len("string")?;
        let bytes = self.take(n, "string")?;
        std::str::from_utf8(bytes).map_err(|e| format!("a string that is not UTF-8 ({e})"))
    }
}

impl Shape {
    /// Walk one value of this shape, keeping nothing: an error says what is wrong.
    pub fn check(&self, at: &mut Cursor) -> Result<(), String> {
        match self {
            Shape::Null => Ok(()),
            // Any byte: fastavro, the reference codec's reader, reads every byte but 0
            // as true (the Avro spec writes only 0 and 1).
            Shape::Bool => at.take(1, "boolean").map(drop),
            Shape::Int => at.int().map(drop),
            Shape::Long => at.long().map(drop),
            Shape::Float => at.take(4, "float").map(drop),
            Shape::Double => at.take(8, "double").map(drop),
            Shape::Bytes => {
                let n = at.len("bytes")?;
                at.take(n, "bytes").map(drop)
            }
            Shape::Str => at.text().map(drop),
            Shape::Array(item) => loop {
                let n = at.block()?;
                if n == 0 {
                    return Ok(());
                }
                for _ in 0..n {
                    item.check(at)?;
                }
            },
            Shape::Map(value) => loop {
                let n = at.block()?;
                if n == 0 {
                    return Ok(());
                }
                for _ in 0..n {
                    at.text()?;
                    value.check(at)?;
                }
            },
            Shape::Record(fields) => fields.iter().try_for_each(|f| f.check(at)),
            Shape::Nullable { null_index, inner } => match at.long()? {
                i if i == *null_index => Ok(()),
                i if i == 1 - *null_index => inner.check(at),
                i => Err(format!("a union branch {i} of 2")),
            },
        }
    }

    /// Append one value that passed [`Shape::check`] to `col` (planned from the same
    /// schema by `columns::plan`).
    pub fn append(&self, col: &mut Col, at: &mut Cursor) -> Result<(), String> {
        match (self, col) {
            (Shape::Nullable { null_index, inner }, col) => {
                if at.long()? == *null_index {
                    col.push(None)
                } else {
                    inner.append(col, at)
                }
            }
            (Shape::Bool, Col::Bool(b)) => {
                b.append_value(at.take(1, "boolean")?[0] != 0);
                Ok(())
            }
            (Shape::Int, Col::Int(b)) => {
                b.append_value(at.int()?);
                Ok(())
            }
            (Shape::Long, Col::Long(b)) => {
                b.append_value(at.long()?);
                Ok(())
            }
            (Shape::Float, Col::Float(b)) => {
                let raw = at.take(4, "float")?;
                b.append_value(f32::from_le_bytes(raw.try_into().expect("4 bytes")));
                Ok(())
            }
            (Shape::Double, Col::Double(b)) => {
                let raw = at.take(8, "double")?;
                b.append_value(f64::from_le_bytes(raw.try_into().expect("8 bytes")));
                Ok(())
            }
            (Shape::Bytes, Col::Bytes(b)) => {
                let n = at.len("bytes")?;
                b.append_value(at.take(n, "bytes")?);
                Ok(())
            }
            (Shape::Str, Col::Str(b)) => {
                b.append_value(at.text()?);
                Ok(())
            }
            (Shape::Array(item_shape), Col::List { item, offsets, valid, .. }) => {
                let mut added = 0i32;
                loop {
                    let n = at.block()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        item_shape.append(item, at)?;
                    }
                    added += n as i32;
                }
                offsets.push(offsets.last().copied().unwrap_or(0) + added);
                valid.push(true);
                Ok(())
            }
            (Shape::Map(value_shape), Col::Map { keys, values, offsets, valid, .. }) => {
                // The check passed: read the entries, then append them by key, the one
                // order a map's row has (columns::Col::push does the same).
                let mut entries: Vec<(&str, Cursor)> = Vec::new();
                loop {
                    let n = at.block()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        let key = at.text()?;
                        let start = at.rest;
                        value_shape.check(at)?;
                        entries.push((key, Cursor { rest: start }));
                    }
                }
                // A stable sort: of a key written twice, the last is kept, as a dict keeps it.
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for i in 0..entries.len() {
                    if entries.get(i + 1).is_some_and(|next| next.0 == entries[i].0) {
                        continue;
                    }
                    keys.append_value(entries[i].0);
                    value_shape.append(values, &mut entries[i].1)?;
                }
                let count = keys.len() as i32;
                offsets.push(count);
                valid.push(true);
                Ok(())
            }
            (Shape::Record(fields), Col::Struct { cols, valid, .. }) => {
                for (field, col) in fields.iter().zip(cols.iter_mut()) {
                    field.append(col, at)?;
                }
                valid.push(true);
                Ok(())
            }
            (Shape::Null, col) => col.push(None),
            (_, col) => Err(format!("a shape that does not match a column of {}",
                                    col.data_type())),
        }
    }
}
