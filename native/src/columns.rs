//! Avro values to Arrow columns, one column builder per schema node.
//!
//! A reader schema is turned once into a tree of [`Col`]s (its Arrow type follows
//! from the schema: a record is a struct, an array a list, a map a map of string
//! keys, `["null", X]` a nullable X); each decoded record is then pushed down that
//! tree, and [`Col::finish`] hands back the Arrow arrays. Nothing here knows an
//! event type: the `.avsc` files are the only description of the shapes.

use std::sync::Arc;

use apache_avro::schema::Schema;
use apache_avro::types::Value;
use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, ListArray, MapArray, StringBuilder, StructArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};

/// A column being built, shaped by one node of a reader schema.
pub enum Col {
    Bool(BooleanBuilder),
    Int(Int32Builder),
    Long(Int64Builder),
    Float(Float32Builder),
    Double(Float64Builder),
    Bytes(BinaryBuilder),
    Str(StringBuilder),
    List {
        item: Box<Col>,
        item_field: FieldRef,
        offsets: Vec<i32>,
        valid: Vec<bool>,
    },
    Map {
        keys: StringBuilder,
        values: Box<Col>,
        value_field: FieldRef,
        offsets: Vec<i32>,
        valid: Vec<bool>,
    },
    Struct {
        names: Vec<String>,
        cols: Vec<Col>,
        fields: Fields,
        valid: Vec<bool>,
    },
}

/// The column for a schema node, and whether the node admits null (`["null", X]`).
pub fn plan(schema: &Schema) -> Result<(Col, bool), String> {
    if let Schema::Union(union) = schema {
        let variants = union.variants();
        let others: Vec<&Schema> = variants.iter().filter(|s| **s != Schema::Null).collect();
        if others.len() != 1 || variants.len() != 2 {
            return Err(format!("only [\"null\", X] unions are read, not {schema:?}"));
        }
        let (col, _) = plan(others[0])?;
        return Ok((col, true));
    }
    let col = match schema {
        Schema::Boolean => Col::Bool(BooleanBuilder::new()),
        Schema::Int => Col::Int(Int32Builder::new()),
        Schema::Long => Col::Long(Int64Builder::new()),
        Schema::Float => Col::Float(Float32Builder::new()),
        Schema::Double => Col::Double(Float64Builder::new()),
        Schema::Bytes => Col::Bytes(BinaryBuilder::new()),
        Schema::String => Col::Str(StringBuilder::new()),
        Schema::Array(array) => {
            let (item, nullable) = plan(&array.items)?;
            let item_field = Arc::new(Field::new("item", item.data_type(), nullable));
            Col::List { item: Box::new(item), item_field, offsets: vec![0], valid: Vec::new() }
        }
        Schema::Map(map) => {
            let (values, nullable) = plan(&map.types)?;
            let value_field = Arc::new(Field::new("value", values.data_type(), nullable));
            Col::Map {
                keys: StringBuilder::new(),
                values: Box::new(values),
                value_field,
                offsets: vec![0],
                valid: Vec::new(),
            }
        }
        Schema::Record(record) => {
            let mut names = Vec::with_capacity(record.fields.len());
            let mut cols = Vec::with_capacity(record.fields.len());
            let mut fields = Vec::with_capacity(record.fields.len());
            for f in &record.fields {
                let (col, nullable) = plan(&f.schema)?;
                fields.push(Field::new(&f.name, col.data_type(), nullable));
                names.push(f.name.clone());
                cols.push(col);
            }
            Col::Struct { names, cols, fields: Fields::from(fields), valid: Vec::new() }
        }
        other => return Err(format!("the Avro type {other:?} has no column here")),
    };
    Ok((col, false))
}

fn entries_field(value_field: &FieldRef) -> FieldRef {
    let fields = Fields::from(vec![
        Arc::new(Field::new("key", DataType::Utf8, false)),
        value_field.clone(),
    ]);
    Arc::new(Field::new("entries", DataType::Struct(fields), false))
}

fn nulls(valid: &mut Vec<bool>) -> Option<NullBuffer> {
    let taken = std::mem::take(valid);
    if taken.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(taken))
    }
}

impl Col {
    pub fn data_type(&self) -> DataType {
        match self {
            Col::Bool(_) => DataType::Boolean,
            Col::Int(_) => DataType::Int32,
            Col::Long(_) => DataType::Int64,
            Col::Float(_) => DataType::Float32,
            Col::Double(_) => DataType::Float64,
            Col::Bytes(_) => DataType::Binary,
            Col::Str(_) => DataType::Utf8,
            Col::List { item_field, .. } => DataType::List(item_field.clone()),
            Col::Map { value_field, .. } => DataType::Map(entries_field(value_field), false),
            Col::Struct { fields, .. } => DataType::Struct(fields.clone()),
        }
    }

    /// Whether `value` fits this column (`nullable`: whether a null may stand in it),
    /// said before anything is appended, so a refused record leaves no partial row.
    /// The decoder reads a string or boolean cut short by the end of the body as a
    /// null (apache-avro's reading of a file's end): in a field that admits no null
    /// that is a truncated body, which the Python codec refuses too.
    pub fn fits(&self, value: Option<&Value>, nullable: bool) -> Result<(), String> {
        let value = match value {
            Some(Value::Union(_, inner)) => Some(inner.as_ref()),
            other => other,
        };
        let Some(value) = value.filter(|v| !matches!(v, Value::Null)) else {
            return if nullable { Ok(()) } else {
                Err(format!("the body ends before a {} value", self.data_type()))
            };
        };
        match (self, value) {
            (Col::Bool(_), Value::Boolean(_))
            | (Col::Int(_), Value::Int(_))
            | (Col::Long(_), Value::Long(_) | Value::Int(_))
            | (Col::Float(_), Value::Float(_))
            | (Col::Double(_), Value::Double(_) | Value::Float(_) | Value::Long(_) | Value::Int(_))
            | (Col::Bytes(_), Value::Bytes(_))
            | (Col::Str(_), Value::String(_)) => Ok(()),
            (Col::List { item, item_field, .. }, Value::Array(items)) => items
                .iter()
                .try_for_each(|v| item.fits(Some(v), item_field.is_nullable())),
            (Col::Map { values, value_field, .. }, Value::Map(map)) => map
                .values()
                .try_for_each(|v| values.fits(Some(v), value_field.is_nullable())),
            (Col::Struct { names, cols, fields, .. }, Value::Record(got)) => {
                if got.len() != cols.len() {
                    return Err(format!("a record of {} fields for {} columns", got.len(),
                                       cols.len()));
                }
                for (((name, col), field), (seen, v)) in
                    names.iter().zip(cols).zip(fields.iter()).zip(got)
                {
                    if name != seen {
                        return Err(format!("field {seen} where the schema has {name}"));
                    }
                    col.fits(Some(v), field.is_nullable()).map_err(|e| format!("{name}: {e}"))?;
                }
                Ok(())
            }
            (col, other) => Err(format!("a {other:?} for a column of {}", col.data_type())),
        }
    }

    /// Append one value (None or `Value::Null`: a null) that [`Col::fits`]. A value of
    /// another shape is an error naming both.
    pub fn push(&mut self, value: Option<&Value>) -> Result<(), String> {
        let value = match value {
            Some(Value::Union(_, inner)) => Some(inner.as_ref()),
            other => other,
        };
        let value = match value {
            None | Some(Value::Null) => None,
            some => some,
        };
        match (self, value) {
            (Col::Bool(b), None) => b.append_null(),
            (Col::Bool(b), Some(Value::Boolean(v))) => b.append_value(*v),
            (Col::Int(b), None) => b.append_null(),
            (Col::Int(b), Some(Value::Int(v))) => b.append_value(*v),
            (Col::Long(b), None) => b.append_null(),
            (Col::Long(b), Some(Value::Long(v))) => b.append_value(*v),
            (Col::Long(b), Some(Value::Int(v))) => b.append_value(i64::from(*v)),
            (Col::Float(b), None) => b.append_null(),
            (Col::Float(b), Some(Value::Float(v))) => b.append_value(*v),
            (Col::Double(b), None) => b.append_null(),
            (Col::Double(b), Some(Value::Double(v))) => b.append_value(*v),
            (Col::Double(b), Some(Value::Float(v))) => b.append_value(f64::from(*v)),
            (Col::Double(b), Some(Value::Long(v))) => b.append_value(*v as f64),
            (Col::Double(b), Some(Value::Int(v))) => b.append_value(f64::from(*v)),
            (Col::Bytes(b), None) => b.append_null(),
            (Col::Bytes(b), Some(Value::Bytes(v))) => b.append_value(v),
            (Col::Str(b), None) => b.append_null(),
            (Col::Str(b), Some(Value::String(v))) => b.append_value(v),
            (Col::List { offsets, valid, .. }, None) => {
                offsets.push(*offsets.last().unwrap_or(&0));
                valid.push(false);
            }
            (Col::List { item, offsets, valid, .. }, Some(Value::Array(items))) => {
                for v in items {
                    item.push(Some(v))?;
                }
                offsets.push(offsets.last().unwrap_or(&0) + items.len() as i32);
                valid.push(true);
            }
            (Col::Map { offsets, valid, .. }, None) => {
                offsets.push(*offsets.last().unwrap_or(&0));
                valid.push(false);
            }
            (Col::Map { keys, values, offsets, valid, .. }, Some(Value::Map(map))) => {
                // A HashMap has no order: entries go by key, so a row is the same on
                // every read (the writer's order is not kept).
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (k, v) in &entries {
                    keys.append_value(k);
                    values.push(Some(v))?;
                }
                offsets.push(offsets.last().unwrap_or(&0) + entries.len() as i32);
                valid.push(true);
            }
            (Col::Struct { cols, valid, .. }, None) => {
                for c in cols.iter_mut() {
                    c.push(None)?;
                }
                valid.push(false);
            }
            (Col::Struct { names, cols, valid, .. }, Some(Value::Record(fields))) => {
                if fields.len() != cols.len() {
                    return Err(format!("a record of {} fields for {} columns", fields.len(),
                                       cols.len()));
                }
                for ((name, col), (got, v)) in names.iter().zip(cols.iter_mut()).zip(fields) {
                    if name != got {
                        return Err(format!("field {got} where the schema has {name}"));
                    }
                    col.push(Some(v))?;
                }
                valid.push(true);
            }
            (col, Some(other)) => {
                return Err(format!("a {other:?} for a column of {}", col.data_type()))
            }
        }
        Ok(())
    }

    /// The array of everything pushed so far; the builder starts empty again.
    pub fn finish(&mut self) -> Result<ArrayRef, String> {
        let array: ArrayRef = match self {
            Col::Bool(b) => Arc::new(b.finish()),
            Col::Int(b) => Arc::new(b.finish()),
            Col::Long(b) => Arc::new(b.finish()),
            Col::Float(b) => Arc::new(b.finish()),
            Col::Double(b) => Arc::new(b.finish()),
            Col::Bytes(b) => Arc::new(b.finish()),
            Col::Str(b) => Arc::new(b.finish()),
            Col::List { item, item_field, offsets, valid } => {
                let values = item.finish()?;
                let taken = std::mem::replace(offsets, vec![0]);
                let offsets = OffsetBuffer::new(ScalarBuffer::from(taken));
                Arc::new(ListArray::try_new(item_field.clone(), offsets, values, nulls(valid))
                    .map_err(|e| e.to_string())?)
            }
            Col::Map { keys, values, value_field, offsets, valid } => {
                let entries = StructArray::try_new(
                    match entries_field(value_field).data_type() {
                        DataType::Struct(fields) => fields.clone(),
                        _ => unreachable!("entries are a struct"),
                    },
                    vec![Arc::new(keys.finish()) as ArrayRef, values.finish()?],
                    None,
                )
                .map_err(|e| e.to_string())?;
                let taken = std::mem::replace(offsets, vec![0]);
                let offsets = OffsetBuffer::new(ScalarBuffer::from(taken));
                Arc::new(MapArray::try_new(entries_field(value_field), offsets, entries,
                                           nulls(valid), false)
                    .map_err(|e| e.to_string())?)
            }
            Col::Struct { cols, fields, valid, .. } => {
                let arrays = cols.iter_mut().map(Col::finish).collect::<Result<Vec<_>, _>>()?;
                Arc::new(StructArray::try_new(fields.clone(), arrays, nulls(valid))
                    .map_err(|e| e.to_string())?)
            }
        };
        Ok(array)
    }
}
