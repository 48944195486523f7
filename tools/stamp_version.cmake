# Writes ${OUTPUT}: the git commit the build is made from and whether the tree had uncommitted
# changes, rewritten only when that changes (so it does not trigger rebuilds on its own).
# Run at every build by the graphbandit_version target (client/CMakeLists.txt).
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown (not a git checkout)")
  set(dirty "false")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes ERROR_QUIET)
  if(changes STREQUAL "")
    set(dirty "false")
  else()
    set(dirty "true")
  endif()
endif()
set(content "// Generated at build time by tools/stamp_version.cmake.\n#define GRAPHBANDIT_COMMIT \"${commit}\"\n#define GRAPHBANDIT_TREE_DIRTY ${dirty}\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
