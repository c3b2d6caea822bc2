# The Python package kvsim: the pure-Python tools (python/kvsim/*.py) and the compiled
# module kvsim._kvsim (pybind11, python/), which links the kvtrace and kvsim libraries
# statically. Both land in <build>/python/kvsim, so from a build tree:
#   PYTHONPATH=<build>/python python3 -c "import kvsim; print(kvsim.open(kvsim.bundled_trace()))"
# Included from the top-level CMakeLists.txt (KVSIM_PYTHON).

set(KVSIM_PYTHON_BUILD_DIR "${CMAKE_BINARY_DIR}/python")

# The .py files, copied at build time so edits to the sources reach the build tree.
file(GLOB KVSIM_PY_SOURCES CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/python/kvsim/*.py")
set(kvsim_py_copies "")
foreach(source IN LISTS KVSIM_PY_SOURCES)
  get_filename_component(name "${source}" NAME)
  set(copy "${KVSIM_PYTHON_BUILD_DIR}/kvsim/${name}")
  add_custom_command(OUTPUT "${copy}" COMMAND ${CMAKE_COMMAND} -E copy_if_different "${source}" "${copy}"
                     DEPENDS "${source}" COMMENT "" VERBATIM)
  list(APPEND kvsim_py_copies "${copy}")
endforeach()
add_custom_target(kvsim_python_files ALL DEPENDS ${kvsim_py_copies})

set(KVSIM_HAVE_PYTHON OFF)
if(KVSIM_PYTHON)
  # Debian's python3 (the one python3-numpy and python3-h5py belong to), not one earlier on PATH.
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3.8 COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(KVSIM_HAVE_PYTHON ON)
    # NO_EXTRAS: no link-time optimisation (it only slows the link of a module whose work is in
    # the static libraries); stripped as pybind11 would in release builds.
    pybind11_add_module(kvsim_python MODULE NO_EXTRAS
      python/module.cpp
      python/module_trace.cpp
      python/module_replay.cpp
      python/module_replay_cells.cpp
      python/module_analysis.cpp
      python/module_plan.cpp
      python/module_eval.cpp
      python/module_policy.cpp
      python/array_source.cpp
    )
    string(TOUPPER "${CMAKE_BUILD_TYPE}" kvsim_build_type)
    if(NOT kvsim_build_type MATCHES "DEBUG|RELWITHDEBINFO")
      pybind11_strip(kvsim_python)
    endif()
    set_target_properties(kvsim_python PROPERTIES
      OUTPUT_NAME _kvsim
      LIBRARY_OUTPUT_DIRECTORY "${KVSIM_PYTHON_BUILD_DIR}/kvsim")
    target_link_libraries(kvsim_python PRIVATE kvsim_sim nlohmann_json::nlohmann_json)
    if(KVSIM_HAVE_QT)  # kvsim.gui: kvsim-gui's window in the Python process
      target_sources(kvsim_python PRIVATE python/module_gui.cpp)
      target_link_libraries(kvsim_python PRIVATE kvsim_gui_lib)
      target_compile_definitions(kvsim_python PRIVATE KVSIM_HAVE_QT)
    endif()
    add_dependencies(kvsim_python kvsim_python_files)
    message(STATUS "kvsim: Python module for ${Python_EXECUTABLE} (${Python_VERSION}), pybind11 ${pybind11_VERSION}")
  else()
    message(STATUS "kvsim: pybind11 or the Python 3 development files not found: the Python module is not built")
  endif()
endif()

# Where `cmake --install` puts the package: Debian's dist-packages for /usr (what the .deb
# uses), the version's dist-packages (on Debian's sys.path for /usr/local) or site-packages.
if(NOT DEFINED KVSIM_PYTHON_INSTALL_DIR)
  if(DEFINED Python_VERSION_MINOR)
    set(kvsim_py_version "3.${Python_VERSION_MINOR}")
  else()
    set(kvsim_py_version "3")
  endif()
  if(EXISTS /usr/lib/python3/dist-packages)
    if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
      set(kvsim_py_dir "lib/python3/dist-packages")
    else()
      set(kvsim_py_dir "lib/python${kvsim_py_version}/dist-packages")
    endif()
  else()
    set(kvsim_py_dir "lib/python${kvsim_py_version}/site-packages")
  endif()
  set(KVSIM_PYTHON_INSTALL_DIR "${kvsim_py_dir}" CACHE STRING "Python package directory, relative to the install prefix")
endif()
