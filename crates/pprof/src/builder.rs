//! Making a profile: [`Builder`] interns every table and merges equal samples.

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use crate::label;
use crate::proto::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};

/// A mapped binary, as [`Builder::mapping`] takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MappingSpec<'a> {
    /// Start of the mapping in memory (0 when addresses are file offsets).
    pub memory_start: u64,
    /// End of the mapping in memory (exclusive; 0 when unknown).
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    pub file_offset: u64,
    /// The binary's path (or a pseudo-name such as `[kernel.kallsyms]`, `[vdso]`).
    pub file: &'a str,
    /// The binary's GNU build-id, as hex.
    pub build_id: Option<&'a str>,
}

/// One line of a location: a function (and where it is), as [`Builder::location`] takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LineSpec<'a> {
    /// The function's name (demangled).
    pub function: &'a str,
    /// The source file, when known.
    pub file: Option<&'a str>,
    /// The source line, 0 when unknown.
    pub line: i64,
}

/// A sample's labels (see [`crate::label`] for the keys written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels<'a> {
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// The thread's command name.
    pub comm: Option<&'a str>,
    /// The process's effective uid.
    pub uid: Option<u32>,
    /// The process's cgroup.
    pub cgroup: Option<&'a str>,
}

/// Makes a CPU profile: sample types `samples/count` and `cpu/nanoseconds`, period type
/// `cpu/nanoseconds`; strings, functions, mappings and locations interned (each stored once,
/// ids from 1 in the order first seen); samples with the same stack and labels merged.
#[derive(Debug)]
pub struct Builder {
    profile: Profile,
    period_ns: u64,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64), u64>,
    mappings: HashMap<(u64, u64, u64, i64, i64), u64>,
    locations: HashMap<LocationKey, u64>,
    samples: HashMap<SampleKey, usize>,
    /// Samples carry their own time (see [`Builder::timed`]): `finish` leaves it.
    timed: bool,
}

/// A location by mapping, address and lines (function id, line).
type LocationKey = (u64, u64, Vec<(u64, i64)>);

/// A sample by location ids and labels (key, string, number).
type SampleKey = (Vec<u64>, Vec<(i64, i64, i64)>);

impl Builder {
    /// An empty CPU profile in which one sample stands for `period_ns` nanoseconds of CPU time
    /// (1e9 / the sampling frequency).
    pub fn new(period_ns: u64) -> Builder {
        let mut b = Builder {
            profile: Profile::default(),
            period_ns,
            strings: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            samples: HashMap::new(),
            timed: false,
        };
        b.string(""); // index 0 is always ""
        let samples = ValueType {
            r#type: b.string("samples"),
            unit: b.string("count"),
        };
        let cpu = ValueType {
            r#type: b.string("cpu"),
            unit: b.string("nanoseconds"),
        };
        b.profile.period_type = Some(ValueType {
            r#type: cpu.r#type,
            unit: cpu.unit,
        });
        b.profile.sample_type = vec![samples, cpu];
        b.profile.period = period_ns.min(i64::MAX as u64) as i64;
        b
    }

    /// An empty time profile: sample types `samples/count` and `KIND/nanoseconds` (e.g.
    /// `off_cpu`, `wall`), each sample's time given with it ([`Builder::add_timed_sample`]),
    /// period type `KIND/nanoseconds` with a period of `period_ns`.
    pub fn timed(kind: &str, period_ns: u64) -> Builder {
        let mut b = Builder::new(period_ns);
        b.timed = true;
        let time = ValueType {
            r#type: b.string(kind),
            unit: b.string("nanoseconds"),
        };
        b.profile.sample_type[1] = time;
        b.profile.period_type = Some(time);
        b
    }

    /// When the profile starts (UNIX time, ns) and how long it covers (ns).
    pub fn set_time(&mut self, time_nanos: u64, duration_nanos: u64) {
        self.profile.time_nanos = time_nanos.min(i64::MAX as u64) as i64;
        self.profile.duration_nanos = duration_nanos.min(i64::MAX as u64) as i64;
    }

    /// Add a free-text comment.
    pub fn add_comment(&mut self, comment: &str) {
        let id = self.string(comment);
        self.profile.comment.push(id);
    }

    /// The string table index of `s`, adding it if new.
    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), id);
        id
    }

    /// The id of function `name` defined in `file`.
    pub fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let name = self.string(name);
        let filename = file.map_or(0, |f| self.string(f));
        let next = self.profile.function.len() as u64 + 1;
        let id = *self.functions.entry((name, filename)).or_insert(next);
        if id == next {
            self.profile.function.push(Function {
                id,
                name,
                system_name: name,
                filename,
                start_line: 0,
            });
        }
        id
    }

    /// The id of a mapping.
    pub fn mapping(&mut self, m: &MappingSpec<'_>) -> u64 {
        let filename = self.string(m.file);
        let build_id = m.build_id.map_or(0, |b| self.string(b));
        let key = (
            m.memory_start,
            m.memory_limit,
            m.file_offset,
            filename,
            build_id,
        );
        let next = self.profile.mapping.len() as u64 + 1;
        let id = *self.mappings.entry(key).or_insert(next);
        if id == next {
            self.profile.mapping.push(Mapping {
                id,
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename,
                build_id,
                has_functions: true,
                ..Default::default()
            });
        }
        id
    }

    /// The id of the location at `address` in mapping `mapping_id` (0: none) whose code is
    /// `lines`, innermost first: the function executing, then each function it was inlined
    /// into, out to the function that was really called.
    pub fn location(&mut self, mapping_id: u64, address: u64, lines: &[LineSpec<'_>]) -> u64 {
        let mut line = Vec::with_capacity(lines.len());
        for l in lines {
            let function_id = self.function(l.function, l.file);
            line.push(Line {
                function_id,
                line: l.line,
                column: 0,
            });
        }
        let key = (
            mapping_id,
            address,
            line.iter().map(|l| (l.function_id, l.line)).collect(),
        );
        let next = self.profile.location.len() as u64 + 1;
        let id = *self.locations.entry(key).or_insert(next);
        if id == next {
            if let Some(m) = mapping_id
                .checked_sub(1)
                .and_then(|i| self.profile.mapping.get_mut(i as usize))
            {
                m.has_filenames |= lines.iter().any(|l| l.file.is_some());
                m.has_line_numbers |= lines.iter().any(|l| l.line != 0);
                m.has_inline_frames |= lines.len() > 1;
            }
            self.profile.location.push(Location {
                id,
                mapping_id,
                address,
                line,
                is_folded: false,
            });
        }
        id
    }

    /// Add `count` samples of the stack `locations` (location ids, leaf first) with `labels`.
    pub fn add_sample(&mut self, locations: &[u64], count: u64, labels: &Labels<'_>) {
        self.add_timed_sample(locations, count, 0, labels);
    }

    /// Add `count` samples of the stack `locations` standing for `nanos` ns together (a time
    /// profile made by [`Builder::timed`]; in a CPU profile the time comes from the period,
    /// and `nanos` is ignored).
    pub fn add_timed_sample(
        &mut self,
        locations: &[u64],
        count: u64,
        nanos: u64,
        labels: &Labels<'_>,
    ) {
        let mut label = Vec::with_capacity(5);
        let mut num = |b: &mut Builder, key: &str, n: Option<u32>| {
            if let Some(n) = n {
                label.push((b.string(key), 0, i64::from(n)));
            }
        };
        num(self, label::PID, labels.pid);
        num(self, label::TID, labels.tid);
        num(self, label::UID, labels.uid);
        for (key, value) in [(label::COMM, labels.comm), (label::CGROUP, labels.cgroup)] {
            if let Some(v) = value {
                let (k, v) = (self.string(key), self.string(v));
                label.push((k, v, 0));
            }
        }
        // The CPU time (second value) is filled in by `finish`, from the period then.
        let count = count.min(i64::MAX as u64) as i64;
        let nanos = nanos.min(i64::MAX as u64) as i64;
        match self.samples.get(&(locations.to_vec(), label.clone())) {
            Some(&i) => {
                let s = &mut self.profile.sample[i];
                s.value[0] = s.value[0].saturating_add(count);
                s.value[1] = s.value[1].saturating_add(nanos);
            }
            None => {
                self.samples.insert(
                    (locations.to_vec(), label.clone()),
                    self.profile.sample.len(),
                );
                self.profile.sample.push(Sample {
                    location_id: locations.to_vec(),
                    value: vec![count, nanos],
                    label: label
                        .into_iter()
                        .map(|(key, str, num)| Label {
                            key,
                            str,
                            num,
                            num_unit: 0,
                        })
                        .collect(),
                });
            }
        }
    }

    /// Samples added so far.
    pub fn samples(&self) -> u64 {
        self.profile
            .sample
            .iter()
            .map(|s| s.value[0].max(0) as u64)
            .sum()
    }

    /// Change the period (when the frequency sampled at is known only later).
    pub fn set_period(&mut self, period_ns: u64) {
        self.period_ns = period_ns;
        self.profile.period = period_ns.min(i64::MAX as u64) as i64;
    }

    /// The profile.
    pub fn finish(mut self) -> Profile {
        if self.timed {
            return self.profile;
        }
        let period = self.period_ns.min(i64::MAX as u64) as i64;
        for s in &mut self.profile.sample {
            s.value[1] = s.value[0].saturating_mul(period);
        }
        self.profile
    }
}

/// The profile's protobuf bytes, uncompressed.
pub fn encode(profile: &Profile) -> Vec<u8> {
    profile.encode_to_vec()
}

/// The profile's protobuf bytes, gzipped (as pprof files and `/debug/pprof/profile` are).
pub fn encode_gz(profile: &Profile) -> Vec<u8> {
    let raw = profile.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        flate2::Compression::default(),
    );
    gz.write_all(&raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_profiles_keep_each_samples_time() {
        let mut b = Builder::timed("off_cpu", 1);
        let m = b.mapping(&MappingSpec {
            file: "/bin/app",
            ..Default::default()
        });
        let l = b.location(m, 0x10, &[]);
        b.add_timed_sample(&[l], 1, 300, &Labels::default());
        b.add_timed_sample(&[l], 2, 700, &Labels::default());
        let p = b.finish();
        assert_eq!(p.sample[0].value, vec![3, 1000]);
        let name = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (name(t.r#type), name(t.unit)))
            .collect();
        assert_eq!(
            types,
            vec![("samples", "count"), ("off_cpu", "nanoseconds")]
        );
    }

    #[test]
    fn tables_are_interned_and_samples_merged() {
        let mut b = Builder::new(1_000_000);
        b.set_time(5, 10);
        let m = b.mapping(&MappingSpec {
            file: "/bin/app",
            build_id: Some("abcd"),
            ..Default::default()
        });
        assert_eq!(m, 1);
        let inner = LineSpec {
            function: "inlined",
            file: Some("a.c"),
            line: 3,
        };
        let outer = LineSpec {
            function: "outer",
            file: Some("a.c"),
            line: 9,
        };
        let l1 = b.location(m, 0x10, &[inner, outer]);
        let l2 = b.location(m, 0x10, &[inner, outer]);
        let l3 = b.location(m, 0x20, &[outer]);
        assert_eq!((l1, l2, l3), (1, 1, 2));
        let labels = Labels {
            pid: Some(7),
            tid: Some(8),
            comm: Some("app"),
            ..Default::default()
        };
        b.add_sample(&[l1, l3], 2, &labels);
        b.add_sample(&[l1, l3], 3, &labels);
        b.add_sample(&[l1, l3], 1, &Labels::default());
        assert_eq!(b.samples(), 6);
        let p = b.finish();
        assert_eq!(p.function.len(), 2);
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, vec![5, 5_000_000]);
        assert!(p.mapping[0].has_inline_frames && p.mapping[0].has_line_numbers);
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.period, 1_000_000);
        let decoded = crate::decode(&encode_gz(&p)).unwrap();
        assert_eq!(decoded, p);
    }
}
