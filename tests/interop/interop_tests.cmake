# tests/interop: odeserve driven by clients that are not built from this repository.
#   interop_node_grpc    Node @grpc/grpc-js + @grpc/proto-loader (needs `npm ci --prefix tests/interop`;
#                        SKIPs with the reason when node or node_modules is missing)
#   interop_prometheus   Debian's prometheus scraping the server, queried over /api/v1/query
# Included from tests/deploy/CMakeLists.txt and from tests/interop/CMakeLists.txt; the guard
# makes either or both work.
include_guard(GLOBAL)

set(_interop_dir ${CMAKE_CURRENT_LIST_DIR})
if(NOT DEFINED ODESERVE_TEST_REPOSITORY)
  set(ODESERVE_TEST_REPOSITORY ${CMAKE_BINARY_DIR}/test-repository)
endif()
if(NOT DEFINED ODESERVE_DEPLOY_PYTHON)
  set(ODESERVE_DEPLOY_PYTHON /usr/bin/python3)
endif()
find_program(ODESERVE_NODE node)
find_program(ODESERVE_PROMETHEUS prometheus)

if(NOT TARGET odeserve)
  foreach(t interop_node_grpc interop_prometheus)
    add_test(NAME ${t} COMMAND sh -c "echo 'SKIP: target odeserve is not defined in this build'; exit 77")
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 LABELS "interop")
  endforeach()
  return()
endif()

if(ODESERVE_NODE)
  add_test(NAME interop_node_grpc
    COMMAND ${ODESERVE_NODE} ${_interop_dir}/grpc_interop.test.js
      --server $<TARGET_FILE:odeserve> --repository ${ODESERVE_TEST_REPOSITORY}
      --proto_root ${PROJECT_SOURCE_DIR}/proto
      --log ${CMAKE_CURRENT_BINARY_DIR}/interop_node_grpc.server.log)
else()
  add_test(NAME interop_node_grpc
    COMMAND sh -c "echo 'SKIP: node not found (docker/install-deps.sh installs nodejs; then npm ci --prefix tests/interop)'; exit 77")
endif()
set_tests_properties(interop_node_grpc PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 900 RUN_SERIAL TRUE LABELS "interop")

if(ODESERVE_PROMETHEUS)
  add_test(NAME interop_prometheus
    COMMAND ${ODESERVE_DEPLOY_PYTHON} ${_interop_dir}/prometheus_interop_test.py
      --server $<TARGET_FILE:odeserve> --repository ${ODESERVE_TEST_REPOSITORY}
      --root ${PROJECT_SOURCE_DIR} --prometheus ${ODESERVE_PROMETHEUS})
else()
  add_test(NAME interop_prometheus
    COMMAND sh -c "echo 'SKIP: prometheus not found (Debian package prometheus, docker/install-deps.sh)'; exit 77")
endif()
set_tests_properties(interop_prometheus PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 600 RUN_SERIAL TRUE LABELS "interop")
