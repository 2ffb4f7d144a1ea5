// docs/options.md, rendered from the option table (umswap::option_table() and removed_options()
// in core/options.cpp). `umswap_options_doc > docs/options.md` writes it, and
// cli_options_doc_test fails when the file in the tree differs from this text.
#pragma once

#include <string>

namespace umswap::cli {

// The whole of docs/options.md: the user options, then the experiments and diagnostics, each with
// its values, default and meaning, then the removed options.
std::string options_markdown();

}  // namespace umswap::cli
