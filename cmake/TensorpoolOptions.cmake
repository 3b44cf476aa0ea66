# Warnings are errors on our code; sanitizers apply to every target we build (library, tests, tools).

function(tp_apply_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference
                                           -Werror)
endfunction()

set(TP_SANITIZER_FLAGS "")
if(TP_SANITIZE)
  string(REPLACE "," ";" tp_sanitizers "${TP_SANITIZE}")
  foreach(sanitizer IN LISTS tp_sanitizers)
    if(NOT sanitizer MATCHES "^(address|thread|undefined)$")
      message(FATAL_ERROR "TP_SANITIZE='${TP_SANITIZE}': '${sanitizer}' is not one of address, thread, undefined")
    endif()
  endforeach()
  if("thread" IN_LIST tp_sanitizers AND "address" IN_LIST tp_sanitizers)
    message(FATAL_ERROR "TP_SANITIZE='${TP_SANITIZE}': thread and address sanitizers cannot be combined")
  endif()
  set(TP_SANITIZER_FLAGS -fsanitize=${TP_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

function(tp_apply_sanitizers target)
  if(TP_SANITIZER_FLAGS)
    target_compile_options(${target} PRIVATE ${TP_SANITIZER_FLAGS})
    target_link_options(${target} PUBLIC ${TP_SANITIZER_FLAGS})
  endif()
endfunction()
