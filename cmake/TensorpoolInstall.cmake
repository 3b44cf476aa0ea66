# SPDX-License-Identifier: Apache-2.0
# install(EXPORT) so that users can find_package(tensorpool) and link tensorpool::tensorpool.

include(CMakePackageConfigHelpers)

install(TARGETS tensorpool EXPORT tensorpoolTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/tensorpool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tensorpoolTargets NAMESPACE tensorpool:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensorpool)

configure_package_config_file(cmake/tensorpoolConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tensorpoolConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensorpool)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tensorpoolConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tensorpoolConfig.cmake ${PROJECT_BINARY_DIR}/tensorpoolConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensorpool)
