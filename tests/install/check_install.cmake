# ctest install.consumer: cmake --install BUILD_DIR into WORK_DIR/prefix, then configure, build
# and run the consumer project against it; the installed kvsim runs `info` on the installed
# bundled trace and finds the installed cards; the installed Python package imports and replays.
# Variables: BUILD_DIR, WORK_DIR, CONSUMER_DIR, GENERATOR, PYTHON, PYTHON_DIR, WITH_PYTHON.
cmake_minimum_required(VERSION 3.25)

function(run)
  cmake_parse_arguments(R "" "EXPECT" "COMMAND;ENV" ${ARGN})
  if(R_ENV)
    set(R_COMMAND ${CMAKE_COMMAND} -E env ${R_ENV} ${R_COMMAND})
  endif()
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${R_COMMAND}\n${out}\n${err}")
  endif()
  if(R_EXPECT AND NOT out MATCHES "${R_EXPECT}")
    message(FATAL_ERROR "unexpected output of ${R_COMMAND} (expected ${R_EXPECT}):\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${R_COMMAND}\n${out}")
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
run(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

foreach(f bin/kvsim include/kvtrace/reader.hpp include/kvsim/replay/replay.hpp include/kvsim/core/engine.hpp share/kvsim/models/llama-3.1-8b.json
          share/kvsim/gpus/h100-80gb.json share/kvsim/traces/stories15M-8x256.h5)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()
file(GLOB configs "${prefix}/lib*/cmake/kvsim/kvsimConfig.cmake")
if(NOT configs)
  message(FATAL_ERROR "no kvsimConfig.cmake under ${prefix}/lib*/cmake/kvsim")
endif()

# The consumer project.
run(COMMAND ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/consumer" -G "${GENERATOR}"
            -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}")
run(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run(COMMAND "${WORK_DIR}/consumer/consumer" "${prefix}/share/kvsim/traces/stories15M-8x256.h5"
    EXPECT "model stories15M: 6 layers x 6 heads.*mean retention 0\\.[0-9]+")

# The installed program, away from the build tree, finds the installed data.
run(COMMAND "${prefix}/bin/kvsim" info "${prefix}/share/kvsim/traces/stories15M-8x256.h5" EXPECT "sequences  8")
run(COMMAND "${prefix}/bin/kvsim" plan --list ENV KVSIM_DATA_DIR= EXPECT "models \\(${prefix}/share/kvsim/models\\)")
# Plots come from the plot module (lib/kvsim/kvsim-plot.so), loaded on the first plot.
if(EXISTS "${BUILD_DIR}/kvsim-plot.so")
  run(COMMAND "${prefix}/bin/kvsim" sweep "${prefix}/share/kvsim/traces/stories15M-8x256.h5" --seqs 0 --layers 0
              --policies recent --budgets 50% --threads 1 --plot "${WORK_DIR}/installed-plot.png" EXPECT "recent")
  if(NOT EXISTS "${WORK_DIR}/installed-plot.png")
    message(FATAL_ERROR "the installed kvsim drew no plot")
  endif()
endif()
run(COMMAND "${prefix}/bin/kvsim" plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --budget 20%
    EXPECT "max seqs")

# The installed Python package (the code has no ';', which CMake would split at).
if(WITH_PYTHON AND PYTHON)
  set(code [=[
import kvsim, os
prefix = os.environ["PREFIX"]
assert kvsim.__file__.startswith(prefix), kvsim.__file__
assert kvsim.data_dir().startswith(prefix), kvsim.data_dir()
t = kvsim.open(kvsim.bundled_trace())
r = kvsim.replay(t, "h2o", "20%", seqs=[0], layers=[0], threads=1, as_frame=False)
print(t.meta["model"], r["retention_mean"])
]=])
  run(COMMAND "${PYTHON}" -c "${code}" ENV "PYTHONPATH=${prefix}/${PYTHON_DIR}" "PREFIX=${prefix}" KVSIM_DATA_DIR=
      EXPECT "stories15M 0\\.[0-9]+")
  run(COMMAND "${PYTHON}" -m kvsim.dump --help ENV "PYTHONPATH=${prefix}/${PYTHON_DIR}" EXPECT "usage:")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
