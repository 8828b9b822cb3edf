#pragma once
// A small streaming JSON writer (RFC 8259): correct escaping, commas and nesting handled,
// non-finite numbers written as null. Misuse (a value where a key is due) asserts in debug.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace odeserve::client {

/// `s` as a quoted JSON string (valid UTF-8 passed through, ill-formed bytes as U+FFFD; control
/// characters escaped).
std::string JsonQuote(absl::string_view s);
/// Shortest decimal text that reads back as the same double; "null" for NaN / infinity.
std::string JsonNumber(double v);

class JsonWriter {
 public:
  /// indent > 0 pretty-prints with that many spaces per level; 0 writes one line.
  explicit JsonWriter(int indent = 2) : indent_(indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);  // the whole unsigned range (seeds), never a negative number
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  /// Inserts an already serialized JSON value (e.g. another writer's document) verbatim.
  JsonWriter& Raw(absl::string_view json);

  /// Key + value shorthands.
  JsonWriter& Field(absl::string_view key, absl::string_view value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, const char* value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, double value) { return Key(key).Number(value); }
  JsonWriter& Field(absl::string_view key, int64_t value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, uint64_t value) { return Key(key).Uint(value); }
  JsonWriter& Field(absl::string_view key, int value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, bool value) { return Key(key).Bool(value); }

  /// The document so far; complete once every Begin has its End.
  const std::string& str() const { return out_; }
  bool complete() const { return stack_.empty() && wrote_root_; }

 private:
  struct Level {
    bool is_object;
    int items = 0;
    bool key_pending = false;
  };
  void BeforeValue();
  void Newline();

  int indent_;
  std::string out_;
  std::vector<Level> stack_;
  bool wrote_root_ = false;
};

}  // namespace odeserve::client
