#include "umswap/core/elf_symbols.h"

#include <elf.h>

#include <cstring>
#include <fstream>

namespace umswap {
namespace {

bool read_at(std::ifstream& in, uint64_t offset, void* out, size_t bytes) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  return static_cast<size_t>(in.gcount()) == bytes;
}

std::map<std::string, uint64_t> fail(std::string* error, std::string why) {
  if (error) *error = std::move(why);
  return {};
}

}  // namespace

std::map<std::string, uint64_t> read_symtab(const std::string& path,
                                            const std::vector<WantedSymbol>& wanted,
                                            std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(error, "cannot open " + path);
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  Elf64_Ehdr eh{};
  if (!read_at(in, 0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return fail(error, path + " is not a 64-bit little-endian ELF file");
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > file_size) {
    return fail(error, path + ": no readable section headers");
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!read_at(in, eh.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr))) {
    return fail(error, path + ": section headers cut short");
  }
  const Elf64_Shdr* symtab = nullptr;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type == SHT_SYMTAB) symtab = &s;
  }
  if (!symtab) return fail(error, path + " has no .symtab (stripped)");
  if (symtab->sh_link >= sections.size() || symtab->sh_entsize != sizeof(Elf64_Sym)) {
    return fail(error, path + ": malformed .symtab");
  }
  const Elf64_Shdr& strtab = sections[symtab->sh_link];
  if (symtab->sh_offset + symtab->sh_size > file_size ||
      strtab.sh_offset + strtab.sh_size > file_size || strtab.sh_size == 0) {
    return fail(error, path + ": .symtab or its string table past the end of the file");
  }
  std::vector<Elf64_Sym> symbols(symtab->sh_size / sizeof(Elf64_Sym));
  std::string names(strtab.sh_size, '\0');
  if (!read_at(in, symtab->sh_offset, symbols.data(), symbols.size() * sizeof(Elf64_Sym)) ||
      !read_at(in, strtab.sh_offset, names.data(), names.size())) {
    return fail(error, path + ": .symtab unreadable");
  }
  names.back() = '\0';  // every name below ends inside the table
  std::map<std::string, uint64_t> found;
  for (const Elf64_Sym& sym : symbols) {
    if (sym.st_name >= names.size() || sym.st_shndx == SHN_UNDEF) continue;
    const std::string_view name(names.data() + sym.st_name);
    for (const WantedSymbol& w : wanted) {
      const bool match = w.prefix ? name.starts_with(w.name) : name == w.name;
      if (match && !found.contains(w.name)) found[w.name] = sym.st_value;
    }
  }
  if (error) error->clear();
  return found;
}

}  // namespace umswap
