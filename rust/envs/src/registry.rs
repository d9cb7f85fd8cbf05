//! Task registry: builds a type-erased pool from a task name and a JSON config.
//!
//! The binding holds `Box<dyn AnyPool>`, so it never names a task type. Registering a task is one
//! line in `make_pool` (and `TASKS`).

use serde_json::{Map, Value};

use crate::error::{EnvError, Result};
use crate::pool::{Pool, StepColumns, TextColumn};
use crate::task::{Common, Split, Task, COMMON_KEYS};
use crate::{planpath::PlanPath, sokoban::Sokoban, sudoku::Sudoku};

pub const TASKS: [&str; 3] = [PlanPath::NAME, Sokoban::NAME, Sudoku::NAME];

/// Object-safe view of `Pool<T>`; see `pool.rs` for the semantics of each call.
pub trait AnyPool: Send + Sync {
    fn task(&self) -> &'static str;
    fn num_envs(&self) -> usize;
    /// The full resolved config (task keys and common keys), as JSON.
    fn config_json(&self) -> String;
    fn reset(&mut self, ids: &[i64], seeds: &[u64], split: Split, obs: &mut TextColumn) -> Result<()>;
    fn step(&mut self, ids: &[i64], actions: &[Option<&str>], out: &mut StepColumns) -> Result<()>;
    fn fork(&mut self, src: i64, dsts: &[i64]) -> Result<()>;
    fn render(&mut self, ids: &[i64], obs: &mut TextColumn) -> Result<()>;
    fn solve(&mut self, ids: &[i64]) -> Result<(Vec<Option<String>>, Vec<u32>)>;
    fn status(&mut self, ids: &[i64]) -> Result<(Vec<u32>, Vec<bool>, Vec<bool>)>;
    fn snapshot(&mut self, ids: &[i64]) -> Result<Vec<Vec<u8>>>;
    fn restore(&mut self, ids: &[i64], blobs: &[&[u8]]) -> Result<()>;
    fn close(&mut self);
}

impl<T: Task> AnyPool for Pool<T> {
    fn task(&self) -> &'static str {
        T::NAME
    }
    fn num_envs(&self) -> usize {
        Pool::num_envs(self)
    }
    fn config_json(&self) -> String {
        let mut map = match serde_json::to_value(self.config()) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        if let Ok(Value::Object(common)) = serde_json::to_value(self.common()) {
            map.extend(common);
        }
        Value::Object(map).to_string()
    }
    fn reset(&mut self, ids: &[i64], seeds: &[u64], split: Split, obs: &mut TextColumn) -> Result<()> {
        Pool::reset(self, ids, seeds, split, obs)
    }
    fn step(&mut self, ids: &[i64], actions: &[Option<&str>], out: &mut StepColumns) -> Result<()> {
        Pool::step(self, ids, actions, out)
    }
    fn fork(&mut self, src: i64, dsts: &[i64]) -> Result<()> {
        Pool::fork(self, src, dsts)
    }
    fn render(&mut self, ids: &[i64], obs: &mut TextColumn) -> Result<()> {
        Pool::render(self, ids, obs)
    }
    fn solve(&mut self, ids: &[i64]) -> Result<(Vec<Option<String>>, Vec<u32>)> {
        Pool::solve(self, ids)
    }
    fn status(&mut self, ids: &[i64]) -> Result<(Vec<u32>, Vec<bool>, Vec<bool>)> {
        Pool::status(self, ids)
    }
    fn snapshot(&mut self, ids: &[i64]) -> Result<Vec<Vec<u8>>> {
        Pool::snapshot(self, ids)
    }
    fn restore(&mut self, ids: &[i64], blobs: &[&[u8]]) -> Result<()> {
        Pool::restore(self, ids, blobs)
    }
    fn close(&mut self) {
        Pool::close(self)
    }
}

/// Splits a flat JSON object into the common keys and the task's own keys, rejecting unknown keys.
pub fn parse_config<T: Task>(json: &str) -> Result<(T::Config, Common)> {
    let invalid = |msg: String| EnvError::InvalidConfig { task: T::NAME, msg };
    let value: Value = serde_json::from_str(json).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(invalid("the config must be a JSON object".into()));
    };
    let mut common_map = Map::new();
    for key in COMMON_KEYS {
        if let Some(v) = map.remove(key) {
            common_map.insert(key.to_string(), v);
        }
    }
    let common: Common = typed(common_map).map_err(invalid)?;
    let config: T::Config = typed(map).map_err(invalid)?;
    Ok((config, common))
}

/// Deserialises a config object; on failure names the offending key (serde's own message does not).
fn typed<C: serde::de::DeserializeOwned>(map: Map<String, Value>) -> std::result::Result<C, String> {
    serde_json::from_value(Value::Object(map.clone())).map_err(|err| {
        // Every field has a default, so a one-key object fails exactly when that key is bad.
        let culprit = map.into_iter().find(|(k, v)| {
            serde_json::from_value::<C>(Value::Object(Map::from_iter([(k.clone(), v.clone())]))).is_err()
        });
        match culprit {
            Some((key, value)) => format!("key `{key}` = {value}: {err}"),
            None => err.to_string(),
        }
    })
}

fn build<T: Task>(num_envs: usize, json: &str) -> Result<Box<dyn AnyPool>> {
    let (config, common) = parse_config::<T>(json)?;
    Ok(Box::new(Pool::<T>::new(num_envs, config, common)?))
}

/// A pool of `num_envs` envs of task `name`, configured by a flat JSON object (`"{}"` for defaults).
pub fn make_pool(name: &str, num_envs: usize, config_json: &str) -> Result<Box<dyn AnyPool>> {
    match name {
        PlanPath::NAME => build::<PlanPath>(num_envs, config_json),
        Sokoban::NAME => build::<Sokoban>(num_envs, config_json),
        Sudoku::NAME => build::<Sudoku>(num_envs, config_json),
        _ => Err(EnvError::UnknownTask { name: name.to_string(), known: TASKS.join(", ") }),
    }
}
