//! The gRPC messages of `proto/spindle.proto`, encoded with prost's wire functions.
//!
//! Written by hand instead of generated: prost's derive macro and build-time generator
//! enable features of build-time crates that RocksDB's build script shares, which makes
//! Cargo rebuild RocksDB from source. Field numbers and types follow the .proto file, which
//! stays the contract for other clients.

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

/// `Kinds` in the .proto file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinds {
    All = 0,
    Nodes = 1,
    Edges = 2,
}

impl TryFrom<i32> for Kinds {
    type Error = i32;

    fn try_from(v: i32) -> Result<Self, i32> {
        match v {
            0 => Ok(Kinds::All),
            1 => Ok(Kinds::Nodes),
            2 => Ok(Kinds::Edges),
            other => Err(other),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct IterateRequest {
    pub view: String,
    pub range_lo: Option<u64>,
    pub range_hi: Option<u64>,
    pub kinds: i32,
    pub keys_only: bool,
    pub from: u64,
    pub to: Option<u64>,
    pub projection: Option<String>,
    pub latest_only: bool,
    pub dedicated: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameChunk {
    pub frames: Bytes,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TailRequest {
    pub from: u64,
    pub batch_records_max: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub index: u64,
    pub commit: bool,
    pub key: Vec<u8>,
    pub value: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordBatch {
    pub records: Vec<Record>,
}

/// Length of a tag plus a varint field.
fn varint_field(tag: u32, v: u64) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(v)
}

impl prost::Message for IterateRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.view.is_empty() {
            encoding::string::encode(1, &self.view, buf);
        }
        if let Some(v) = &self.range_lo {
            encoding::uint64::encode(2, v, buf);
        }
        if let Some(v) = &self.range_hi {
            encoding::uint64::encode(3, v, buf);
        }
        if self.kinds != 0 {
            encoding::int32::encode(4, &self.kinds, buf);
        }
        if self.keys_only {
            encoding::bool::encode(5, &self.keys_only, buf);
        }
        if self.from != 0 {
            encoding::uint64::encode(6, &self.from, buf);
        }
        if let Some(v) = &self.to {
            encoding::uint64::encode(7, v, buf);
        }
        if let Some(v) = &self.projection {
            encoding::string::encode(8, v, buf);
        }
        if self.latest_only {
            encoding::bool::encode(9, &self.latest_only, buf);
        }
        if self.dedicated {
            encoding::bool::encode(10, &self.dedicated, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.view, buf, ctx),
            2 => encoding::uint64::merge(wire_type, self.range_lo.get_or_insert(0), buf, ctx),
            3 => encoding::uint64::merge(wire_type, self.range_hi.get_or_insert(0), buf, ctx),
            4 => encoding::int32::merge(wire_type, &mut self.kinds, buf, ctx),
            5 => encoding::bool::merge(wire_type, &mut self.keys_only, buf, ctx),
            6 => encoding::uint64::merge(wire_type, &mut self.from, buf, ctx),
            7 => encoding::uint64::merge(wire_type, self.to.get_or_insert(0), buf, ctx),
            8 => encoding::string::merge(
                wire_type,
                self.projection.get_or_insert_with(String::new),
                buf,
                ctx,
            ),
            9 => encoding::bool::merge(wire_type, &mut self.latest_only, buf, ctx),
            10 => encoding::bool::merge(wire_type, &mut self.dedicated, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let mut n = 0;
        if !self.view.is_empty() {
            n += encoding::string::encoded_len(1, &self.view);
        }
        n += self.range_lo.map_or(0, |v| varint_field(2, v));
        n += self.range_hi.map_or(0, |v| varint_field(3, v));
        if self.kinds != 0 {
            n += encoding::int32::encoded_len(4, &self.kinds);
        }
        n += usize::from(self.keys_only) * 2;
        if self.from != 0 {
            n += varint_field(6, self.from);
        }
        n += self.to.map_or(0, |v| varint_field(7, v));
        n += self
            .projection
            .as_ref()
            .map_or(0, |p| encoding::string::encoded_len(8, p));
        n += usize::from(self.latest_only) * 2;
        n += usize::from(self.dedicated) * 2;
        n
    }

    fn clear(&mut self) {
        *self = IterateRequest::default();
    }
}

impl prost::Message for FrameChunk {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.frames.is_empty() {
            encoding::bytes::encode(1, &self.frames, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::bytes::merge(wire_type, &mut self.frames, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        if self.frames.is_empty() {
            0
        } else {
            encoding::bytes::encoded_len(1, &self.frames)
        }
    }

    fn clear(&mut self) {
        self.frames = Bytes::new();
    }
}

impl prost::Message for TailRequest {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.from != 0 {
            encoding::uint64::encode(1, &self.from, buf);
        }
        if self.batch_records_max != 0 {
            encoding::uint32::encode(2, &self.batch_records_max, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::uint64::merge(wire_type, &mut self.from, buf, ctx),
            2 => encoding::uint32::merge(wire_type, &mut self.batch_records_max, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let mut n = 0;
        if self.from != 0 {
            n += varint_field(1, self.from);
        }
        if self.batch_records_max != 0 {
            n += varint_field(2, u64::from(self.batch_records_max));
        }
        n
    }

    fn clear(&mut self) {
        *self = TailRequest::default();
    }
}

impl prost::Message for Record {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.index != 0 {
            encoding::uint64::encode(1, &self.index, buf);
        }
        if self.commit {
            encoding::bool::encode(2, &self.commit, buf);
        }
        if !self.key.is_empty() {
            encoding::bytes::encode(3, &self.key, buf);
        }
        if let Some(v) = &self.value {
            encoding::string::encode(4, v, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::uint64::merge(wire_type, &mut self.index, buf, ctx),
            2 => encoding::bool::merge(wire_type, &mut self.commit, buf, ctx),
            3 => encoding::bytes::merge(wire_type, &mut self.key, buf, ctx),
            4 => encoding::string::merge(
                wire_type,
                self.value.get_or_insert_with(String::new),
                buf,
                ctx,
            ),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let mut n = 0;
        if self.index != 0 {
            n += varint_field(1, self.index);
        }
        n += usize::from(self.commit) * 2;
        if !self.key.is_empty() {
            n += encoding::bytes::encoded_len(3, &self.key);
        }
        n + self
            .value
            .as_ref()
            .map_or(0, |v| encoding::string::encoded_len(4, v))
    }

    fn clear(&mut self) {
        *self = Record::default();
    }
}

impl prost::Message for RecordBatch {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encoding::message::encode_repeated(1, &self.records, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::message::merge_repeated(wire_type, &mut self.records, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        encoding::message::encoded_len_repeated(1, &self.records)
    }

    fn clear(&mut self) {
        self.records.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(m: &M) {
        let bytes = m.encode_to_vec();
        assert_eq!(bytes.len(), m.encoded_len(), "{m:?}");
        assert_eq!(&M::decode(bytes.as_slice()).unwrap(), m);
    }

    #[test]
    fn messages_round_trip_with_exact_lengths() {
        round_trip(&IterateRequest::default());
        round_trip(&IterateRequest {
            view: "disk-0".into(),
            range_lo: Some(0),
            range_hi: Some(1 << 32),
            kinds: 2,
            keys_only: true,
            from: 5,
            to: Some(u64::MAX),
            projection: Some("/name".into()),
            latest_only: true,
            dedicated: true,
        });
        round_trip(&FrameChunk {
            frames: Bytes::from_static(b"\x02abc"),
        });
        round_trip(&TailRequest {
            from: 300,
            batch_records_max: 70_000,
        });
        round_trip(&RecordBatch {
            records: vec![
                Record {
                    index: 1,
                    commit: false,
                    key: vec![0, 1, 2],
                    value: Some("{}".into()),
                },
                Record {
                    index: 2,
                    commit: true,
                    key: vec![9],
                    value: None,
                },
            ],
        });
    }

    #[test]
    fn the_wire_matches_protobuf_for_a_known_message() {
        // field 1 (string "a"), field 2 (varint 0, explicitly present), field 6 (varint 150)
        let m = IterateRequest {
            view: "a".into(),
            range_lo: Some(0),
            from: 150,
            ..IterateRequest::default()
        };
        assert_eq!(
            m.encode_to_vec(),
            vec![0x0a, 0x01, b'a', 0x10, 0x00, 0x30, 0x96, 0x01]
        );
    }
}
