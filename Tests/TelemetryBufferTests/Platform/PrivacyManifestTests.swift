import Foundation
import XCTest

/// The privacy manifest Apple requires of SDKs that call "required reason" APIs
/// (`Sources/TelemetryBuffer/Resources/PrivacyInfo.xcprivacy`), held against the sources an Apple platform
/// compiles: every category whose APIs they call is declared with an approved reason, and nothing else.
final class PrivacyManifestTests: XCTestCase {
    /// This file is Tests/TelemetryBufferTests/Platform/PrivacyManifestTests.swift.
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    private static let manifestURL = root.appendingPathComponent("Sources/TelemetryBuffer/Resources/PrivacyInfo.xcprivacy")

    private func manifest() throws -> [String: Any] {
        let data = try Data(contentsOf: Self.manifestURL)
        return try XCTUnwrap(PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any])
    }

    func testEveryRequiredReasonCategoryTheSourcesCallIsDeclaredWithAnApprovedReason() throws {
        let declared = try XCTUnwrap(manifest()["NSPrivacyAccessedAPITypes"] as? [[String: Any]])
        var reasons: [String: [String]] = [:]
        for entry in declared {
            let category = try XCTUnwrap(entry["NSPrivacyAccessedAPIType"] as? String)
            reasons[category] = try XCTUnwrap(entry["NSPrivacyAccessedAPITypeReasons"] as? [String])
        }
        // Which category each source file an Apple platform compiles calls, by the first API name found.
        var used: [String: String] = [:]
        for folder in ["Sources/TelemetryBuffer", "Sources/CTelemetrySignals"] {
            let base = Self.root.appendingPathComponent(folder)
            let files = try XCTUnwrap(FileManager.default.subpathsOfDirectory(atPath: base.path))
                .filter { file in [".swift", ".c", ".h"].contains { file.hasSuffix($0) } }.sorted()
            XCTAssertFalse(files.isEmpty, folder)
            for file in files {
                let source = AppleCompiledSource(try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8))
                for (category, apis) in RequiredReasonAPIs.categories {
                    if let api = apis.names.first(where: source.mentions) { used[category] = used[category] ?? "\(folder)/\(file): \(api)" }
                }
            }
        }
        for (category, place) in used {
            let given = reasons[category] ?? []
            XCTAssertFalse(given.isEmpty, "\(place) calls an API of \(category), which the manifest does not declare")
        }
        for (category, given) in reasons {
            XCTAssertNotNil(used[category], "the manifest declares \(category), which no source calls any more")
            let approved = try XCTUnwrap(RequiredReasonAPIs.categories[category]?.reasons, "\(category) is not a category Apple lists")
            XCTAssertTrue(Set(given).isSubset(of: approved), "\(category): \(given) are not all among \(approved.sorted())")
        }
    }

    func testTheManifestSaysNoTrackingAndWhatTheLibraryCollects() throws {
        let manifest = try manifest()
        XCTAssertEqual(manifest["NSPrivacyTracking"] as? Bool, false)
        XCTAssertEqual((manifest["NSPrivacyTrackingDomains"] as? [String])?.isEmpty, true)
        let collected = try XCTUnwrap(manifest["NSPrivacyCollectedDataTypes"] as? [[String: Any]])
        var types: [String: Bool] = [:]
        for entry in collected {
            XCTAssertEqual(entry["NSPrivacyCollectedDataTypeTracking"] as? Bool, false)
            XCTAssertEqual(entry["NSPrivacyCollectedDataTypePurposes"] as? [String], ["NSPrivacyCollectedDataTypePurposeAppFunctionality"])
            types[try XCTUnwrap(entry["NSPrivacyCollectedDataType"] as? String)] = try XCTUnwrap(entry["NSPrivacyCollectedDataTypeLinked"] as? Bool)
        }
        // Crashes, logs and spans with the device and OS they ran on; the user's ID only through `setUser`.
        XCTAssertEqual(types, [
            "NSPrivacyCollectedDataTypeCrashData": false, "NSPrivacyCollectedDataTypePerformanceData": false,
            "NSPrivacyCollectedDataTypeOtherDiagnosticData": false, "NSPrivacyCollectedDataTypeUserID": true,
        ])
    }

    /// SwiftPM builds the manifest into the library's resource bundle (on Linux as well, where nothing reads it).
    func testTheManifestIsAResourceOfTheLibrary() {
        let products = Demo.executable.deletingLastPathComponent()
        let bundles = ["TelemetryBuffer_TelemetryBuffer.resources", "TelemetryBuffer_TelemetryBuffer.bundle",
                       "TelemetryBuffer_TelemetryBuffer.bundle/Contents/Resources"]
        XCTAssertTrue(bundles.contains { FileManager.default.fileExists(atPath: products.appendingPathComponent("\($0)/PrivacyInfo.xcprivacy").path) },
                      "no PrivacyInfo.xcprivacy in a resource bundle in \(products.path)")
    }

    /// The reader of what an Apple platform compiles: other platforms' branches, comments and strings do not count.
    func testOnlyWhatAnApplePlatformCompilesCounts() {
        let swift = AppleCompiledSource("""
            #if os(Linux)
            let a = statvfs()
            #elseif canImport(Darwin)
            let b = lstat(path) // fstatfs(x)
            #else
            let c = statfs()
            #endif
            let d = "mach_absolute_time()" /* systemUptime */
            #if !canImport(Glibc) && arch(arm64)
            let e = UserDefaults.standard
            #endif
            """)
        XCTAssertTrue(swift.mentions("lstat"))
        XCTAssertTrue(swift.mentions("UserDefaults"), "an undecided condition counts")
        for name in ["statvfs", "statfs", "fstatfs", "mach_absolute_time", "systemUptime", "stat"] {
            XCTAssertFalse(swift.mentions(name), name)
        }
        let c = AppleCompiledSource("""
            #if defined(__linux__)
            int a(int fd) { struct statfs fs; return fstatfs(fd, &fs); }
            #elif defined(__APPLE__)
            int b(int fd) { char q = '"'; return fstat(fd, 0); }
            #endif
            #ifdef __linux__
            int c = statvfs(0);
            #endif
            """)
        XCTAssertTrue(c.mentions("fstat"))
        XCTAssertFalse(c.mentions("fstatfs"))
        XCTAssertFalse(c.mentions("statvfs"))
    }
}
