# The model families' sources, found by folder (each family is models/<family>/): the torch-free
# halves (spec.cpp, with the list and the transformer group) that config/ reads, and the builders.
# Included by src/CMakeLists.txt and tests/fuzz/CMakeLists.txt.
set(_models ${CMAKE_CURRENT_LIST_DIR})
file(GLOB LTRAIN_MODEL_SPEC_SOURCES CONFIGURE_DEPENDS ${_models}/*/spec.cpp)
list(APPEND LTRAIN_MODEL_SPEC_SOURCES ${_models}/families.cpp ${_models}/transformer.cpp)
file(GLOB LTRAIN_MODEL_BUILDER_SOURCES CONFIGURE_DEPENDS ${_models}/*/*.cpp)
list(REMOVE_ITEM LTRAIN_MODEL_BUILDER_SOURCES ${LTRAIN_MODEL_SPEC_SOURCES})
list(APPEND LTRAIN_MODEL_BUILDER_SOURCES ${_models}/builders.cpp)
