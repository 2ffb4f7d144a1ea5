// Preloaded by the CLI's end-to-end tests in place of libumswap.so: it must load, nothing more.
extern "C" int umswap_cli_test_preload_marker() {
  return 42;
}
