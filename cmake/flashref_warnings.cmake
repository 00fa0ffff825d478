# -Wall -Wextra on every target of ours; -Werror is left to CI's choice (FLASHREF_WERROR).
option(FLASHREF_WERROR "Treat warnings as errors" OFF)
function(flashref_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  if(FLASHREF_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
