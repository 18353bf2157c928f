#include "model/series.h"

#include <array>

namespace stackscope {

namespace {
constexpr std::array<std::string_view, 6> kSubsystems = {"cpu", "gpu", "memory", "network", "storage", "software"};
constexpr std::array<std::string_view, 3> kKinds = {"gauge", "counter", "static"};
constexpr std::array<std::string_view, 3> kCategories = {"dynamic", "event_counter", "static"};

template <typename E, size_t N>
std::optional<E> parse_in(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}
template <size_t N>
std::string_view name_in(const std::array<std::string_view, N>& names, size_t i) {
  return i < N ? names[i] : std::string_view("unknown");
}
}  // namespace

std::string_view subsystem_name(Subsystem s) { return name_in(kSubsystems, static_cast<size_t>(s)); }
std::optional<Subsystem> parse_subsystem(std::string_view s) { return parse_in<Subsystem>(kSubsystems, s); }
std::string_view series_kind_name(SeriesKind k) { return name_in(kKinds, static_cast<size_t>(k)); }
std::optional<SeriesKind> parse_series_kind(std::string_view s) { return parse_in<SeriesKind>(kKinds, s); }
std::string_view series_category_name(SeriesCategory c) { return name_in(kCategories, static_cast<size_t>(c)); }
std::optional<SeriesCategory> parse_series_category(std::string_view s) {
  return parse_in<SeriesCategory>(kCategories, s);
}

}  // namespace stackscope
