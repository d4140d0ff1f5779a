# CONFCLIP_CPU_VARIANTS: ggml's CPU backend once per x86-64 generation, in one
# static program. ggml's own way (GGML_CPU_ALL_VARIANTS) needs
# GGML_BACKEND_DL: shared libraries loaded with dlopen at start. Here each
# variant is a static library compiled like ggml's ggml-cpu target (its
# sources, definitions and options, taken from that target) with the
# variant's instruction-set flags; scripts/cpu-variants.sh then prefixes every
# global symbol of each one with its name and merges them, with
# csrc/cpu-variants.c, into libggml-cpu.a. ggml and llama.cpp reach the CPU
# backend only through ggml_backend_cpu_reg() (the registry), which
# csrc/cpu-variants.c defines: it asks each variant's ggml_backend_score()
# (ggml's cpu-feats.cpp, the same check GGML_BACKEND_DL's loader makes) and
# returns the best one's registration.
#
# The variants are ggml's GGML_CPU_ALL_VARIANTS list for x86, less sse42 and
# sandybridge (pre-2013 CPUs get x64) and alderlake (AVX-VNNI without
# AVX-512: it speeds up only quantized dot products; those CPUs get haswell):
# each variant is one more compile of the CPU backend. ggml's own ggml-cpu
# target is x64 (the x86-64 baseline, SSE2). Add one as
# "name:FEATURE,FEATURE" (ggml's GGML_<FEATURE> options).
set(CONFCLIP_CPU_VARIANT_LIST
  "haswell:SSE42,AVX,F16C,AVX2,BMI2,FMA"
  "skylakex:SSE42,AVX,F16C,AVX2,BMI2,FMA,AVX512"
  "icelake:SSE42,AVX,F16C,AVX2,BMI2,FMA,AVX512,AVX512_VBMI,AVX512_VNNI")

# The compiler flags of each feature (ggml-cpu/CMakeLists.txt's x86 branch).
set(cpu_flags_SSE42 -msse4.2)
set(cpu_flags_AVX -mavx)
set(cpu_flags_F16C -mf16c)
set(cpu_flags_AVX2 -mavx2)
set(cpu_flags_BMI2 -mbmi2)
set(cpu_flags_FMA -mfma)
set(cpu_flags_AVX_VNNI -mavxvnni)
set(cpu_flags_AVX512_BF16 -mavx512bf16)
set(cpu_flags_AVX512 -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw)
set(cpu_flags_AVX512_VBMI -mavx512vbmi)
set(cpu_flags_AVX512_VNNI -mavx512vnni)

# ggml-cpu links OpenMP's imported targets, which are found in its folder.
find_package(OpenMP REQUIRED)
get_target_property(cpu_dir ggml-cpu SOURCE_DIR)
get_target_property(cpu_sources ggml-cpu SOURCES)
get_target_property(cpu_defs ggml-cpu COMPILE_DEFINITIONS)
get_target_property(cpu_opts ggml-cpu COMPILE_OPTIONS)
get_target_property(cpu_incs ggml-cpu INCLUDE_DIRECTORIES)
get_target_property(cpu_libs ggml-cpu LINK_LIBRARIES)
# and what ggml's folder gives every target in it (_GNU_SOURCE, ...)
get_directory_property(dir_defs DIRECTORY ${cpu_dir} COMPILE_DEFINITIONS)
get_directory_property(dir_opts DIRECTORY ${cpu_dir} COMPILE_OPTIONS)
foreach (v cpu_defs cpu_opts cpu_incs cpu_libs dir_defs dir_opts)
  if (NOT ${v})
    set(${v} "")
  endif()
endforeach()
set(abs_sources "")
foreach (src ${cpu_sources})
  if (IS_ABSOLUTE "${src}")
    list(APPEND abs_sources "${src}")
  else()
    list(APPEND abs_sources "${cpu_dir}/${src}")
  endif()
endforeach()

# The scoring object of one variant: cpu-feats.cpp compiled without the
# variant's flags (it runs on any CPU) but with its feature definitions.
function(confclip_cpu_feats target)
  add_library(${target}-feats OBJECT ${cpu_dir}/ggml-cpu/arch/x86/cpu-feats.cpp)
  target_include_directories(${target}-feats PRIVATE ${cpu_dir} ${cpu_dir}/../include)
  target_compile_definitions(${target}-feats PRIVATE ${dir_defs} ${ARGN} GGML_BACKEND_DL GGML_BACKEND_BUILD GGML_BACKEND_SHARED)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${target}-feats>)
endfunction()

confclip_cpu_feats(ggml-cpu)
set(CONFCLIP_CPU_VARIANT_TARGETS ggml-cpu)
set(CONFCLIP_CPU_VARIANT_NAMES x64)
foreach (entry ${CONFCLIP_CPU_VARIANT_LIST})
  string(REPLACE ":" ";" parts "${entry}")
  list(GET parts 0 tag)
  list(GET parts 1 feats)
  string(REPLACE "," ";" feats "${feats}")
  set(flags "")
  set(defs "")
  foreach (f ${feats})
    list(APPEND flags ${cpu_flags_${f}})
    list(APPEND defs GGML_${f})
  endforeach()
  set(t ggml-cpu-${tag})
  add_library(${t} STATIC ${abs_sources})
  target_include_directories(${t} PRIVATE ${cpu_incs})
  target_compile_definitions(${t} PRIVATE ${dir_defs} ${cpu_defs} ${defs})
  target_compile_options(${t} PRIVATE ${dir_opts} ${cpu_opts} ${flags})
  target_link_libraries(${t} PRIVATE ${cpu_libs})
  target_compile_features(${t} PRIVATE c_std_11 cxx_std_17)
  confclip_cpu_feats(${t} ${defs})
  message(STATUS "confclip: CPU variant ${tag}: ${flags}")
  list(APPEND CONFCLIP_CPU_VARIANT_TARGETS ${t})
  list(APPEND CONFCLIP_CPU_VARIANT_NAMES ${tag})
endforeach()

# The dispatcher, with the variants' names.
string(REPLACE ";" "," names_csv "${CONFCLIP_CPU_VARIANT_NAMES}")
set(x_list "")
foreach (n ${CONFCLIP_CPU_VARIANT_NAMES})
  string(APPEND x_list "X(${n}) ")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/cpu-variants/cpu-variants.h "#define CONFCLIP_CPU_VARIANTS(X) ${x_list}\n")
add_library(confclip-cpu-dispatch STATIC ${CMAKE_CURRENT_SOURCE_DIR}/csrc/cpu-variants.c)
target_include_directories(confclip-cpu-dispatch PRIVATE ${LLAMA_DIR}/ggml/include ${CMAKE_BINARY_DIR}/cpu-variants)
list(APPEND CONFCLIP_CPU_VARIANT_TARGETS confclip-cpu-dispatch)
file(WRITE ${CMAKE_BINARY_DIR}/cpu-variants.txt "${CONFCLIP_CPU_VARIANT_NAMES}\n")
