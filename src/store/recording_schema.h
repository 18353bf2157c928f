// The recording file's schema, shared by writer and reader. Bump kFormatVersion on any incompatible change.
#pragma once

namespace stackscope::schema {

inline constexpr const char* kFormatName = "stackscope-recording";
inline constexpr int kFormatVersion = 1;
// A decoded block may not exceed this (guards against corrupt sizes).
inline constexpr size_t kMaxBlockBytes = 256u << 20;

inline constexpr const char* kCreate = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series(id INTEGER PRIMARY KEY, name TEXT NOT NULL, subsystem TEXT NOT NULL,
  unit TEXT NOT NULL, kind TEXT NOT NULL, category TEXT NOT NULL, host TEXT NOT NULL, device TEXT NOT NULL,
  source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS event_blocks(id INTEGER PRIMARY KEY, t_first INTEGER NOT NULL, t_last INTEGER NOT NULL,
  n INTEGER NOT NULL, layers INTEGER NOT NULL, raw_bytes INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sample_blocks(id INTEGER PRIMARY KEY, t_first INTEGER NOT NULL, t_last INTEGER NOT NULL,
  n INTEGER NOT NULL, raw_bytes INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS layer_counts(layer TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS drops(source TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, t INTEGER NOT NULL, source TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS findings(id INTEGER PRIMARY KEY, detector TEXT NOT NULL, layer TEXT NOT NULL,
  subsystem TEXT NOT NULL, host TEXT NOT NULL, subject TEXT NOT NULL, t_start INTEGER NOT NULL,
  t_end INTEGER NOT NULL, score REAL NOT NULL, summary TEXT NOT NULL, evidence TEXT NOT NULL);
)sql";

}  // namespace stackscope::schema
