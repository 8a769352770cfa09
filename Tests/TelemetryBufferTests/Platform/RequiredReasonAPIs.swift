/// Apple's "required reason" API categories for privacy manifests: for each, the names by which the
/// library's sources could call one of its APIs (C functions, and Foundation's methods, properties and
/// resource keys), and the reasons Apple approves. Kept to Apple's published list; a new entry there
/// belongs here.
enum RequiredReasonAPIs {
    struct Category {
        var names: [String]
        var reasons: Set<String>
    }

    static let categories: [String: Category] = [
        "NSPrivacyAccessedAPICategoryFileTimestamp": Category(
            names: ["stat", "fstat", "fstatat", "lstat", "getattrlist", "fgetattrlist", "getattrlistat", "getattrlistbulk",
                    "creationDate", "modificationDate", "fileModificationDate", "contentModificationDateKey",
                    "creationDateKey", "contentModificationDate"],
            reasons: ["DDA9.1", "C617.1", "3B52.1", "0A2A.1"]),
        "NSPrivacyAccessedAPICategorySystemBootTime": Category(
            names: ["systemUptime", "mach_absolute_time"],
            reasons: ["35F9.1", "8FFB.1", "3D61.1"]),
        "NSPrivacyAccessedAPICategoryDiskSpace": Category(
            names: ["statfs", "fstatfs", "statvfs", "fstatvfs", "volumeAvailableCapacityKey",
                    "volumeAvailableCapacityForImportantUsageKey", "volumeAvailableCapacityForOpportunisticUsageKey",
                    "volumeTotalCapacityKey", "volumeAvailableCapacity", "volumeAvailableCapacityForImportantUsage",
                    "volumeAvailableCapacityForOpportunisticUsage", "volumeTotalCapacity", "systemFreeSize", "systemSize"],
            reasons: ["85F4.1", "E174.1", "7D9E.1", "B728.1"]),
        "NSPrivacyAccessedAPICategoryActiveKeyboards": Category(
            names: ["activeInputModes"],
            reasons: ["3EC4.1", "54BD.1"]),
        "NSPrivacyAccessedAPICategoryUserDefaults": Category(
            names: ["UserDefaults", "NSUserDefaults"],
            reasons: ["CA92.1", "1C8F.1", "C56D.1", "AC6B.1"]),
    ]
}
