#include <stdio.h>
int main(void) { puts("sdflow " SDFLOW_VERSION); return 0; }
