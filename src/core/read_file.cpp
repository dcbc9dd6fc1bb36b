#include "core/read_file.h"

#include "core/error.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace toy {

std::string read_whole_file(const std::string &path, std::string_view what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("{}: '{}' is a directory, not a file", what, path);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot read '{}'", what, path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("{}: '{}' could not be read", what, path);
    return ss.str();
}

}  // namespace toy
