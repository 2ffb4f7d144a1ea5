// `umswap compare`'s readers of JSON fields and small helpers its parts share (compare_parse.cpp,
// compare_rows.cpp, compare_render.cpp). Private to cli/. Pure.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

#include "umswap/cli/compare.h"
#include "umswap/core/stats_schema.h"

namespace umswap::cli::detail {

using nlohmann::json;
namespace schema = umswap::stats_schema;

inline constexpr double kGB = 1e9;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Field readers that treat a missing field, or one of the wrong type, as unknown: by key (the
// program's summary line), or by the stats file's schema (stats_schema.h).
inline const json* field(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

inline std::optional<double> double_of(const json* v) {
  if (!v || !v->is_number()) return std::nullopt;
  const double d = v->get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

inline std::optional<std::string> string_of(const json* v) {
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

inline std::optional<bool> bool_of(const json* v) {
  return v && v->is_boolean() ? std::optional<bool>(v->get<bool>()) : std::nullopt;
}

inline std::optional<uint64_t> get_u64(const json& object, std::string_view key) {
  return u64_of(field(object, key));
}

inline std::optional<uint64_t> get_u64(const json& j, const schema::Field& f) {
  return u64_of(schema::find(j, f));
}

inline std::optional<double> get_double(const json& object, std::string_view key) {
  return double_of(field(object, key));
}

inline std::optional<double> get_double(const json& j, const schema::Field& f) {
  return double_of(schema::find(j, f));
}

inline std::optional<std::string> get_string(const json& j, const schema::Field& f) {
  return string_of(schema::find(j, f));
}

inline std::optional<bool> get_bool(const json& j, const schema::Field& f) {
  return bool_of(schema::find(j, f));
}

template <typename T>
inline json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

inline json text_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

inline bool has_budget(CompareMode mode) {
  return mode == CompareMode::online || mode == CompareMode::replay || mode == CompareMode::vmm;
}

inline std::string gib(std::optional<uint64_t> bytes) {
  return bytes ? fmt::format("{:.2f} GiB", static_cast<double>(*bytes) / kGiB)
               : std::string("unknown");
}

}  // namespace umswap::cli::detail
