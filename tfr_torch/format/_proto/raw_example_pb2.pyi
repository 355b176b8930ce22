from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RawFeatures(_message.Message):
    __slots__ = ("feature",)
    class FeatureEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    feature: _containers.ScalarMap[str, bytes]
    def __init__(self, feature: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class RawExample(_message.Message):
    __slots__ = ("features",)
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    features: RawFeatures
    def __init__(self, features: _Optional[_Union[RawFeatures, _Mapping]] = ...) -> None: ...

class RawFeatureList(_message.Message):
    __slots__ = ("feature",)
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    feature: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, feature: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RawFeatureLists(_message.Message):
    __slots__ = ("feature_list",)
    class FeatureListEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RawFeatureList
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RawFeatureList, _Mapping]] = ...) -> None: ...
    FEATURE_LIST_FIELD_NUMBER: _ClassVar[int]
    feature_list: _containers.MessageMap[str, RawFeatureList]
    def __init__(self, feature_list: _Optional[_Mapping[str, RawFeatureList]] = ...) -> None: ...

class RawSequenceExample(_message.Message):
    __slots__ = ("context", "feature_lists")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LISTS_FIELD_NUMBER: _ClassVar[int]
    context: RawFeatures
    feature_lists: RawFeatureLists
    def __init__(self, context: _Optional[_Union[RawFeatures, _Mapping]] = ..., feature_lists: _Optional[_Union[RawFeatureLists, _Mapping]] = ...) -> None: ...
