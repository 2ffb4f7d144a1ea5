// `umswap compare`: the budget from --budget and the runs' peaks, and the bundled sample's batch
// from the GPU's free memory. Pure.
#include "umswap/cli/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "compare_fields.h"

namespace umswap::cli {
using namespace detail;

BudgetChoice resolve_budget(const SizeSpec& spec, std::optional<uint64_t> managed_peak,
                            std::optional<uint64_t> native_peak, std::optional<uint64_t> estimate) {
  BudgetChoice choice;
  if (!spec.is_percent) {
    choice.bytes = spec.bytes;
    choice.description = format_bytes(spec.bytes);
    return choice;
  }
  std::optional<uint64_t> basis;
  std::string_view basis_name;
  if (managed_peak && *managed_peak > 0) {
    basis = managed_peak;
    basis_name = "managed peak";
  } else if (native_peak && *native_peak > 0) {
    basis = native_peak;
    basis_name = "native peak_allocated_bytes";
  } else if (estimate && *estimate > 0) {
    basis = estimate;
    basis_name = "estimated footprint";
  }
  if (!basis) {
    choice.error = fmt::format(
        "budget unknown: {} is a share of the footprint, and neither the managed run's stats "
        "(allocator.managed_bytes_peak) nor the native run's summary line "
        "(peak_allocated_bytes) gave one; give --budget as a size (for example 8G)",
        spec.to_string());
    return choice;
  }
  choice.bytes = spec.resolve(*basis);
  choice.description = fmt::format("{} of {} ({}) = {}", spec.to_string(), format_bytes(*basis),
                                   basis_name, format_bytes(*choice.bytes));
  return choice;
}

uint64_t allowed_memory(uint64_t free_bytes, uint64_t total_bytes,
                        const std::optional<SizeSpec>& managed_limit) {
  uint64_t allowed =
      static_cast<uint64_t>(static_cast<long double>(free_bytes) * kDefaultFreeShare);
  if (managed_limit && !managed_limit->is_zero()) {
    allowed = std::min(allowed, managed_limit->resolve(total_bytes));
  }
  return allowed;
}

BatchChoice choose_batch(
    uint64_t allowed_bytes,
    const std::function<std::optional<uint64_t>(int batch, std::string* error)>& footprint_of) {
  BatchChoice choice;
  for (const int batch : kDefaultBatches) {
    std::string error;
    const std::optional<uint64_t> footprint = footprint_of(batch, &error);
    if (!footprint) {
      choice.error = error.empty() ? fmt::format("no footprint for batch {}", batch) : error;
      return choice;
    }
    choice.footprint_bytes = *footprint;
    if (*footprint <= allowed_bytes) {
      choice.batch = batch;
      return choice;
    }
  }
  choice.error = fmt::format(
      "even batch {} needs {} and only {} may be used (80% of the GPU's free memory, or "
      "UMSWAP_MANAGED_LIMIT if lower); refusing to oversubscribe the GPU",
      kDefaultBatches[std::size(kDefaultBatches) - 1], format_bytes(choice.footprint_bytes),
      format_bytes(allowed_bytes));
  return choice;
}

}  // namespace umswap::cli
