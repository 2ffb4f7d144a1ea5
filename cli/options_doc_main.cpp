// umswap_options_doc: prints docs/options.md, rendered from the option table. After changing the
// table (core/options.cpp): build/bin/umswap_options_doc > docs/options.md
#include <cstdio>
#include <string>

#include "umswap/cli/options_doc.h"

int main() {
  const std::string text = umswap::cli::options_markdown();
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() ? 0 : 1;
}
