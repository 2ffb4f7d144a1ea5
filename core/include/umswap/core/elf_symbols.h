// Symbols of an ELF64 shared object read from its file's .symtab, hidden ones included.
//
// Why: PyTorch's caching allocator offers a per-block event hook (attachAllocatorTraceTracker)
// only as a C++ virtual method of a class its library does not export; the symbol table that
// builds keep (PyTorch 2.11's wheel does, measured 2026-11-30) names it. dlsym reads .dynsym only.
// Pure file reading: no loading, no CUDA. Thread safety: none needed (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace umswap {

// A wanted symbol: its exact name, or (prefix true) the first symbol whose name starts with it.
struct WantedSymbol {
  std::string name;
  bool prefix = false;
};

// The values (st_value: the offset from the load address, for a shared object) of the wanted
// symbols found in `path`'s .symtab, keyed by WantedSymbol::name; a symbol not found is absent.
// An unreadable file, not ELF64 little-endian, or without .symtab: an empty map and `error` says
// why (when given).
std::map<std::string, uint64_t> read_symtab(const std::string& path,
                                            const std::vector<WantedSymbol>& wanted,
                                            std::string* error = nullptr);

}  // namespace umswap
