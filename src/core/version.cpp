// Library version string.
namespace toy {
const char *version() { return "0.1.0"; }
}  // namespace toy
