# `cmake --install`: the libraries and headers with a CMake package (find_package(kvsim):
# kvsim::trace, kvsim::sim), the kvsim and kvsim-gui programs, the Python package, and the
# data (cards, bundled traces) under share/kvsim; and the Debian package (cpack -G DEB, see
# scripts/package.sh). Included from the top-level CMakeLists.txt after the targets.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVSIM_INSTALL_DATA_DIR "${CMAKE_INSTALL_DATADIR}/kvsim")
set(KVSIM_INSTALL_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/kvsim")

# kvsim::data_dir(): the source tree's data/ when run from this build tree, else the
# installation's share/kvsim (found from the binary's location, so installs can move).
set_property(SOURCE sim/core/data_dir.cpp TARGET_DIRECTORY kvsim_core APPEND PROPERTY COMPILE_DEFINITIONS
  KVSIM_SOURCE_DATA_DIR="${CMAKE_SOURCE_DIR}/data"
  KVSIM_BUILD_DIR="${CMAKE_BINARY_DIR}"
  KVSIM_INSTALL_DATA_DIR="${CMAKE_INSTALL_PREFIX}/${KVSIM_INSTALL_DATA_DIR}")

# The exported names match the build tree's ALIAS targets: kvsim::trace, kvsim::sim (every
# library), and one per component (kvsim::core, kvsim::replay, ...).
set(kvsim_components core policies quant replay analysis eval plan model)
set_target_properties(kvtrace PROPERTIES EXPORT_NAME trace)
set_target_properties(kvsim_sim PROPERTIES EXPORT_NAME sim)
set(kvsim_component_targets kvtrace kvsim_sim)
foreach(component IN LISTS kvsim_components)
  set_target_properties(kvsim_${component} PROPERTIES EXPORT_NAME ${component})
  list(APPEND kvsim_component_targets kvsim_${component})
  get_target_property(component_dir kvsim_${component} SOURCE_DIR)
  install(DIRECTORY ${component_dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(DIRECTORY trace/format/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${kvsim_component_targets} EXPORT kvsimTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kvsimTargets NAMESPACE kvsim:: DESTINATION ${KVSIM_INSTALL_CMAKE_DIR})
configure_package_config_file(cmake/kvsimConfig.cmake.in "${CMAKE_BINARY_DIR}/kvsimConfig.cmake"
                              INSTALL_DESTINATION ${KVSIM_INSTALL_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR KVSIM_INSTALL_DATA_DIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/kvsimConfigVersion.cmake"
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/kvsimConfig.cmake" "${CMAKE_BINARY_DIR}/kvsimConfigVersion.cmake"
        DESTINATION ${KVSIM_INSTALL_CMAKE_DIR})

install(TARGETS kvsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET kvsim_plot AND KVSIM_PLOT_MODULE)
  install(TARGETS kvsim_plot LIBRARY DESTINATION ${KVSIM_PLOT_INSTALL_DIR})
endif()
if(TARGET kvsim-gui)
  install(TARGETS kvsim-gui RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(DIRECTORY data/models data/gpus DESTINATION ${KVSIM_INSTALL_DATA_DIR} FILES_MATCHING PATTERN "*.json")
install(FILES data/traces/stories15M-8x256.h5 data/traces/prompts.txt DESTINATION ${KVSIM_INSTALL_DATA_DIR}/traces)
install(FILES data/prompts/qa-stories.jsonl DESTINATION ${KVSIM_INSTALL_DATA_DIR}/prompts)
install(FILES data/README.md DESTINATION ${KVSIM_INSTALL_DATA_DIR})

install(FILES ${KVSIM_PY_SOURCES} DESTINATION ${KVSIM_PYTHON_INSTALL_DIR}/kvsim)
if(KVSIM_HAVE_PYTHON)
  install(TARGETS kvsim_python LIBRARY DESTINATION ${KVSIM_PYTHON_INSTALL_DIR}/kvsim)
endif()

# ---- Debian package: cpack -G DEB (scripts/package.sh configures a portable release build) ----
set(CPACK_PACKAGE_NAME kvsim)
set(CPACK_PACKAGE_VENDOR "kvsim")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "KV-cache eviction replay for LLM attention traces")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "kvsim replays attention traces recorded from real model runs through KV-cache\n"
  "eviction policies (Scissorhands, H2O, StreamingLLM, TOVA, SnapKV, oracle bounds)\n"
  "at any memory budget, measures the attention mass each keeps and how persistent\n"
  "token importance is, and turns that into batch-size capacity for real GPUs.\n"
  "Ships the kvsim CLI, the kvsim-gui explorer, the Python module kvsim, the static\n"
  "libraries with headers and a CMake package (find_package(kvsim)), model and GPU\n"
  "cards and a bundled real trace.")
set(CPACK_PACKAGE_CONTACT "kvsim maintainers <kvsim@localhost>" CACHE STRING "Maintainer of the Debian package")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # libhdf5, Boost, Qt6, libstdc++ from the ELF files
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
if(KVSIM_HAVE_PYTHON)
  # The module is built for one Python minor version (its file name says which).
  math(EXPR kvsim_next_minor "${Python_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3 (>= 3.${Python_VERSION_MINOR}~), python3 (<< 3.${kvsim_next_minor}), python3-numpy")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-h5py")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "python3-matplotlib, python3-pandas, openmpi-bin, libhdf5-dev, libeigen3-dev, nlohmann-json3-dev, cmake")
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build.*/" "/out/" "__pycache__")
include(CPack)
