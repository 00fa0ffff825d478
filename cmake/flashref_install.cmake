# Install rules and the package config, so another project can find_package(flashref) and
# link flashref::flashref (all backends) or flashref::verify (judging, .npy I/O).
include(CMakePackageConfigHelpers)

set(_flashref_targets flashref_core flashref_reference flashref_cpu flashref_ring flashref_registry flashref_verify)
if(FLASHREF_HAVE_CUDA)
  list(APPEND _flashref_targets flashref_cuda flashref_ring_cuda)
endif()

install(TARGETS ${_flashref_targets}
  EXPORT flashrefTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS flashref_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

foreach(_dir include reference/include cpu/include ring/include verify/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
if(FLASHREF_HAVE_CUDA)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/cuda/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()

set(FLASHREF_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashref)
install(EXPORT flashrefTargets NAMESPACE flashref:: DESTINATION ${FLASHREF_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flashrefConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashrefConfig.cmake INSTALL_DESTINATION ${FLASHREF_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashrefConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashrefConfig.cmake
  ${PROJECT_BINARY_DIR}/flashrefConfigVersion.cmake DESTINATION ${FLASHREF_INSTALL_CMAKEDIR})
