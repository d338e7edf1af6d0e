# embed.cmake - writes OUT, a C file holding the bytes of IN as
# `const unsigned char NAME[]` (NUL-terminated) and `const size_t NAME_len`.
# Run as: cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN} by cmake/embed.cmake */\n#include <stddef.h>\nconst unsigned char ${NAME}[] = {${bytes}0};\nconst size_t ${NAME}_len = ${len};\n")
