#include "umswap/cli/cli_main.h"

int main(int argc, char** argv) {
  return umswap::cli::cli_main(argc, argv);
}
