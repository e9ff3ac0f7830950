// libiwemu-emulator.so is the static emulator linked whole; a shared library
// target needs at least one source of its own.
namespace iwemu {
extern const char kEmulatorLibrary[] = "libiwemu-emulator.so";
}
